"""render_tickets: one PDF page per seat with its barcode; good and bad labels; a replay
after a half-done attempt completes it, after a done one changes nothing."""

from __future__ import annotations

import re
import threading
from datetime import UTC, datetime

import psycopg
import pytest

from stagedoor.errors import RenderStopped, SeatLabelInvalid
from stagedoor.ticket_pdf import TicketOrder, barcode_value, render_pdf
from stagedoor.tickets import render_tickets
from tests.stagedoor.conftest import RunJob, make_job
from tests.stagedoor.helpers import event_with_seats, paid_order

ORDER = TicketOrder(4471, "ana@example.com", "Hamlet", datetime(2026, 12, 1, 19, 30, tzinfo=UTC))


def pages(pdf: bytes) -> int:
    return len(re.findall(rb"/Type /Page\b(?!s)", pdf))


@pytest.mark.parametrize("label", ["14C", "1A", "120F"])
def test_a_seat_number_and_a_row_letter_make_a_barcode(label: str) -> None:
    assert barcode_value(4471, label) == f"SD-4471-{label}"


@pytest.mark.parametrize("label", ["14-C", "C14", "14c", "14", "", "14CC", "1234A"])
def test_any_other_label_is_refused_with_the_label_in_the_message(label: str) -> None:
    with pytest.raises(SeatLabelInvalid) as caught:
        barcode_value(4471, label)
    assert str(caught.value) == f"{label!r} is not a row letter and a seat number"


def test_one_page_per_seat_and_the_same_bytes_each_time() -> None:
    pdf = render_pdf(ORDER, ["14A", "14B", "14C"])
    assert pdf.startswith(b"%PDF") and pages(pdf) == 3
    assert render_pdf(ORDER, ["14A", "14B", "14C"]) == pdf


def tickets(conn: psycopg.Connection, order: int) -> tuple | None:
    return conn.execute("SELECT pdf, pages, rendered_at FROM tickets WHERE order_id = %s", (order,)).fetchone()


def ready_emails(conn: psycopg.Connection) -> list[tuple]:
    return conn.execute("SELECT payload FROM outbox WHERE payload->>'template' = 'tickets_ready'").fetchall()


def test_render_stores_the_pdf_records_completion_once_and_a_rerun_changes_nothing(
    conn: psycopg.Connection, run_job: RunJob
) -> None:
    event, seats = event_with_seats(conn, ["3A", "3B", "3C"])
    order = paid_order(conn, event, seats)
    job = make_job("render_tickets", {"order_id": str(order), "outbox_id": "2"})
    run_job(render_tickets, job)
    first = tickets(conn, order)
    assert first is not None and pages(first[0]) == 3 and first[1] == 3 and first[2] is not None
    assert ready_emails(conn) == [
        ({"email": "buyer@example.com", "template": "tickets_ready", "order_id": str(order)},)
    ]
    run_job(render_tickets, job)
    assert tickets(conn, order) == first
    assert len(ready_emails(conn)) == 1


def test_a_replay_after_a_half_done_attempt_completes_it(conn: psycopg.Connection, run_job: RunJob) -> None:
    event, seats = event_with_seats(conn, ["3A", "3B"])
    order = paid_order(conn, event, seats)
    # what an attempt that died after storing a PDF and before recording completion leaves
    conn.execute("INSERT INTO tickets (order_id, pdf, pages) VALUES (%s, 'half-written', 0)", (order,))
    run_job(render_tickets, make_job("render_tickets", {"order_id": str(order)}))
    pdf, count, rendered_at = tickets(conn, order)  # type: ignore[misc]
    assert pages(pdf) == 2 and count == 2 and rendered_at is not None
    assert len(ready_emails(conn)) == 1


def test_a_bad_label_fails_the_render_and_a_data_fix_lets_the_replay_succeed(
    conn: psycopg.Connection, run_job: RunJob
) -> None:
    event, seats = event_with_seats(conn, ["14-B", "14-C"])
    order = paid_order(conn, event, seats)
    job = make_job("render_tickets", {"order_id": str(order)})
    with pytest.raises(SeatLabelInvalid, match=r"^'14-B' is not a row letter and a seat number$"):
        run_job(render_tickets, job)
    assert tickets(conn, order) is None and ready_emails(conn) == []

    conn.execute("UPDATE seats SET label = replace(label, '-', '') WHERE label LIKE '%-%'")
    run_job(render_tickets, job)
    assert tickets(conn, order)[1] == 2  # type: ignore[index]
    assert len(ready_emails(conn)) == 1


def test_a_render_told_to_stop_ends_before_its_next_page() -> None:
    stop = threading.Event()
    stop.set()
    with pytest.raises(RenderStopped, match="told to stop before seat 14A"):
        render_pdf(ORDER, ["14A", "14B"], stop)
