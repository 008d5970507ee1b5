"""The checkout's write when an order is paid, as the application does it.

One transaction: the order is paid, its seats sold (version + 1) and their
holds released, the payment recorded, and the outbox gets the jobs the
payment calls for: the confirmation email, the tickets' render, and the
reminder due 24 hours before the event (``run_at``; the relay parks it in
``delayed``, or publishes it at once when the event is less than a day away).
The demo night uses it; so do the tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

import psycopg
from psycopg.types.json import Jsonb

from worker.store.trace_context import TRACEPARENT, TRACESTATE, current_fields

REMINDER_BEFORE = timedelta(hours=24)


@dataclass(frozen=True)
class Payment:
    amount: Decimal
    currency: str
    payrail_ref: str
    created_at: datetime
    status: str = "captured"


def record_paid_order(
    conn: psycopg.Connection,
    event_id: int,
    seat_ids: Sequence[int],
    buyer_email: str,
    payment: Payment,
    *,
    trace: dict[str, str] | None = None,
) -> int:
    """Record a paid order and its outbox rows; return the order id.

    ``trace`` (``request_id``, ``trace``) is copied into each outbox payload so
    the jobs, and their dead letters, lead back to the checkout request; the
    request's W3C trace context, when a span is active, goes with each row
    (``traceparent``, ``tracestate``) and the relay writes it into the job.
    """
    with conn.transaction():
        cur = conn.execute(
            "INSERT INTO orders (event_id, buyer_email, status, created_at, paid_at)"
            " VALUES (%s, %s, 'paid', %s, %s) RETURNING id",
            (event_id, buyer_email, payment.created_at, payment.created_at),
        )
        order_id = cur.fetchone()[0]  # type: ignore[index]
        conn.execute("DELETE FROM holds WHERE seat_id = ANY(%s)", (list(seat_ids),))
        conn.execute(
            "UPDATE seats SET status = 'sold', version = version + 1 WHERE id = ANY(%s)",
            (list(seat_ids),),
        )
        with conn.cursor() as c:
            c.executemany(
                "INSERT INTO order_seats (order_id, seat_id) VALUES (%s, %s)", [(order_id, s) for s in seat_ids]
            )
        conn.execute(
            "INSERT INTO payments (order_id, amount, currency, payrail_ref, status, created_at)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (order_id, payment.amount, payment.currency, payment.payrail_ref, payment.status, payment.created_at),
        )
        cur = conn.execute("SELECT starts_at, organizer_id FROM events WHERE id = %s", (event_id,))
        starts_at, organizer_id = cur.fetchone()  # type: ignore[misc]
        common = {"order_id": str(order_id), **(trace or {})}
        on_sale = organizer_key(organizer_id)  # the confirmation and the tickets take the organizer's turns
        rows = [
            ("send_email", {**common, "email": buyer_email, "template": "order_confirmation"}, None, on_sale),
            ("render_tickets", common, None, on_sale),
            ("send_reminder", common, starts_at - REMINDER_BEFORE, None),
        ]
        context = current_fields()
        with conn.cursor() as c:
            c.executemany(
                "INSERT INTO outbox (kind, payload, run_at, traceparent, tracestate, fair_key)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
                [
                    (kind, Jsonb(payload), run_at, context.get(TRACEPARENT), context.get(TRACESTATE), fair_key)
                    for kind, payload, run_at, fair_key in rows
                ],
            )
    return int(order_id)


def organizer_key(organizer_id: int) -> str:
    """The fair key of an organizer's on-sale work (``worker.store.fair``): one organizer's 100,000-ticket
    on-sale takes turns with every other organizer's confirmations and renders instead of holding them."""
    return f"organizer-{organizer_id}"
