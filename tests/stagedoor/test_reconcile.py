"""reconcile_payments: each kind of mismatch found, across Payrail's pages, recorded once."""

from __future__ import annotations

import asyncio
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import psycopg
import pytest

from stagedoor.context import open_context
from stagedoor.errors import PayrailError
from stagedoor.reconcile import PaymentRecord, compare, day_to_reconcile, fetch_payrail, reconcile_payments
from stagedoor.standins import PayrailStandIn
from tests.stagedoor.conftest import RunJob, make_job

DAY = date(2026, 11, 29)


def ours(conn: psycopg.Connection, ref: str, amount: str, status: str = "captured", day: date = DAY) -> None:
    at = datetime(day.year, day.month, day.day, 12, tzinfo=UTC)
    conn.execute(
        "INSERT INTO payments (amount, currency, payrail_ref, status, created_at) VALUES (%s, 'CZK', %s, %s, %s)",
        (Decimal(amount), ref, status, at),
    )


def theirs(ref: str, amount: str, status: str = "captured", currency: str = "CZK") -> dict[str, str]:
    return {"reference": ref, "amount": amount, "currency": currency, "status": status}


def issues(conn: psycopg.Connection) -> list[tuple]:
    return conn.execute(
        "SELECT day, payrail_ref, issue, ours, theirs, found_at FROM reconciliation_issues ORDER BY payrail_ref, issue"
    ).fetchall()


def test_compare_finds_each_kind_of_mismatch() -> None:
    def record(ref: str, amount: str, status: str = "captured", currency: str = "CZK") -> PaymentRecord:
        return PaymentRecord(ref, Decimal(amount), currency, status)

    found = compare(
        {r.reference: r for r in [record("a", "1"), record("b", "2"), record("c", "3"), record("d", "4")]},
        {r.reference: r for r in [record("a", "1"), record("b", "2.5"), record("c", "3", "refunded"),
                                  record("e", "5"), record("f", "6", currency="EUR")]},
    )  # fmt: skip
    assert [(i.payrail_ref, i.issue) for i in found] == [
        ("b", "amount_differs"),
        ("c", "status_differs"),
        ("d", "missing_at_payrail"),
        ("e", "missing_here"),
        ("f", "missing_here"),
    ]
    assert compare({"x": record("x", "1")}, {"x": record("x", "1", currency="EUR")})[0].issue == "amount_differs"


def test_the_handler_records_every_mismatch_once(
    conn: psycopg.Connection, run_job: RunJob, payrail: PayrailStandIn
) -> None:
    ours(conn, "pr_same", "450.00")
    ours(conn, "pr_amount", "450.00")
    ours(conn, "pr_status", "450.00")
    ours(conn, "pr_only_here", "450.00")
    ours(conn, "pr_next_day", "450.00", day=DAY + timedelta(days=1))  # another day: not compared
    payrail.set_payments(
        DAY.isoformat(),
        [theirs("pr_same", "450"), theirs("pr_amount", "500.00"), theirs("pr_status", "450.00", "refunded"),
         theirs("pr_only_there", "90.00")],
    )  # fmt: skip
    job = make_job("reconcile_payments", {"day": DAY.isoformat()})
    run_job(reconcile_payments, job)
    first = issues(conn)
    assert [(row[1], row[2]) for row in first] == [
        ("pr_amount", "amount_differs"),
        ("pr_only_here", "missing_at_payrail"),
        ("pr_only_there", "missing_here"),
        ("pr_status", "status_differs"),
    ]
    assert {row[0] for row in first} == {DAY}
    assert first[0][3:5] == (
        {"amount": "450.00", "currency": "CZK", "status": "captured"},
        {"amount": "500.00", "currency": "CZK", "status": "captured"},
    )
    run_job(reconcile_payments, job)
    assert issues(conn) == first


def test_every_page_of_payrail_is_read(db: str, conn: psycopg.Connection, payrail: PayrailStandIn) -> None:
    refs = [f"pr_{i:04d}" for i in range(250)]
    payrail.set_payments(DAY.isoformat(), [theirs(ref, "10.00") for ref in refs])

    async def fetch() -> dict[str, PaymentRecord]:
        async with open_context(db, payrail_url=payrail.url) as ctx:
            return await fetch_payrail(ctx, DAY)

    assert sorted(asyncio.run(fetch())) == refs


def test_payrail_errors_say_what_failed(run_job: RunJob, payrail: PayrailStandIn) -> None:
    with pytest.raises(PayrailError, match=r"GET .*/v1/payments\?date=2026-11-29&page=1 answered 404"):
        run_job(reconcile_payments, make_job("reconcile_payments", {"day": "2026-11-29"}),
                payrail_url=payrail.url + "/nowhere")  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"day": "2026-06-01"}, date(2026, 6, 1)),
        ({"scheduled_for": "2026-06-02T01:00:00Z"}, date(2026, 6, 1)),  # 03:00 in Prague, summer time
        ({"scheduled_for": "2026-03-01T02:00:00Z"}, date(2026, 2, 28)),
    ],
)
def test_the_day_reconciled(fields: dict[str, str], expected: date) -> None:
    assert day_to_reconcile(make_job("reconcile_payments", fields)) == expected
