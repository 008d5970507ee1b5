"""Small builders of Stagedoor rows for the tests (one event, its seats, orders)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import psycopg

from stagedoor.orders import Payment, record_paid_order


def event_with_seats(
    conn: psycopg.Connection, labels: Sequence[str], *, starts_at: datetime | None = None
) -> tuple[int, list[int]]:
    """An organizer, a seat map with ``labels`` and an event on it; return (event id, seat ids)."""
    organizer = conn.execute("INSERT INTO organizers (name) VALUES ('Test hall') RETURNING id").fetchone()[0]
    seat_map = conn.execute(
        "INSERT INTO seat_maps (organizer_id, name) VALUES (%s, 'Stalls') RETURNING id", (organizer,)
    ).fetchone()[0]
    event = conn.execute(
        "INSERT INTO events (organizer_id, seat_map_id, name, starts_at) VALUES (%s, %s, 'Hamlet', %s) RETURNING id",
        (organizer, seat_map, starts_at or datetime.now(UTC) + timedelta(hours=5)),
    ).fetchone()[0]
    seats = [
        conn.execute(
            "INSERT INTO seats (seat_map_id, label) VALUES (%s, %s) RETURNING id", (seat_map, label)
        ).fetchone()[0]
        for label in labels
    ]
    return event, seats


def paid_order(conn: psycopg.Connection, event: int, seats: Sequence[int], ref: str = "pr_1") -> int:
    payment = Payment(Decimal("450.00") * len(seats), "CZK", ref, datetime.now(UTC))
    return record_paid_order(conn, event, seats, "buyer@example.com", payment)
