"""expire_holds: frees expired holds' seats, touches no seat that is no longer held, runs twice alike."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from stagedoor.holds import expire_holds
from tests.stagedoor.conftest import RunJob, make_job
from tests.stagedoor.helpers import event_with_seats


def hold(conn: psycopg.Connection, seat: int, expires_in: str) -> None:
    conn.execute("UPDATE seats SET status = 'held', version = version + 1 WHERE id = %s", (seat,))
    conn.execute(
        "INSERT INTO holds (seat_id, buyer_email, expires_at) VALUES (%s, 'b@example.com', now() + %s::interval)",
        (seat, expires_in),
    )


def state(conn: psycopg.Connection) -> tuple[Any, ...]:
    seats = conn.execute("SELECT label, status, version FROM seats ORDER BY label").fetchall()
    holds = conn.execute("SELECT s.label FROM holds h JOIN seats s ON s.id = h.seat_id ORDER BY s.label").fetchall()
    return tuple(seats), tuple(label for (label,) in holds)


def test_expired_holds_free_their_held_seats_and_nothing_else(conn: psycopg.Connection, run_job: RunJob) -> None:
    _, (expired, live, sold, _free) = event_with_seats(conn, ["1A", "1B", "1C", "1D"])
    hold(conn, expired, "-1 minute")
    hold(conn, live, "5 minutes")
    hold(conn, sold, "-1 minute")
    conn.execute("UPDATE seats SET status = 'sold', version = version + 1 WHERE id = %s", (sold,))  # sold meanwhile

    run_job(expire_holds, make_job("expire_holds"))
    after_first = state(conn)
    assert after_first == (
        (("1A", "available", 2), ("1B", "held", 1), ("1C", "sold", 2), ("1D", "available", 0)),
        ("1B",),
    )
    run_job(expire_holds, make_job("expire_holds"))
    assert state(conn) == after_first


def test_at_most_one_hold_per_seat(conn: psycopg.Connection, run_job: RunJob) -> None:
    _, (seat,) = event_with_seats(conn, ["7F"])
    hold(conn, seat, "-1 second")
    with pytest.raises(psycopg.errors.UniqueViolation):
        hold(conn, seat, "5 minutes")
    run_job(expire_holds, make_job("expire_holds"))
    hold(conn, seat, "5 minutes")  # the expired hold is gone: the seat can be held again
    assert conn.execute("SELECT count(*) FROM holds WHERE seat_id = %s", (seat,)).fetchone() == (1,)
