"""reconcile_payments: compare a day's payments with Payrail's records, nightly at 03:00.

The day is the job's ``day`` field (``YYYY-MM-DD``) or, by default, the UTC
day before the tick it was scheduled for. Payrail's API pages through a day:
``GET {PAYRAIL_URL}/v1/payments?date=D&page=N&per_page=100`` answers
``{"payments": [{"reference", "amount", "currency", "status"}, ...],
"next_page": N+1 or null}``. Each mismatch becomes a row of
``reconciliation_issues`` (unique per day, reference and issue, so a second
run records nothing new): ``missing_at_payrail``, ``missing_here``,
``amount_differs`` (amount or currency), ``status_differs``. No retries: a
second walk over every payment of the night is the next night's job.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

import httpx
from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from stagedoor.context import StagedoorContext, current
from stagedoor.errors import PayrailError
from stagedoor.queues import BULK
from worker import Job, job_kind, schedule

log = logging.getLogger("stagedoor.reconcile")

PAGE_SIZE = 100
#: Pages beyond this mean Payrail keeps answering next_page: stop instead of walking forever.
MAX_PAGES = 10_000


@dataclass(frozen=True)
class PaymentRecord:
    """One payment as both sides describe it."""

    reference: str
    amount: Decimal
    currency: str
    status: str

    def as_json(self) -> dict[str, str]:
        return {"amount": str(self.amount), "currency": self.currency, "status": self.status}


@dataclass(frozen=True)
class Issue:
    """One mismatch: a reference, what is wrong, and both sides' view of it."""

    payrail_ref: str
    issue: str
    ours: PaymentRecord | None
    theirs: PaymentRecord | None


def compare(ours: dict[str, PaymentRecord], theirs: dict[str, PaymentRecord]) -> list[Issue]:
    """Every mismatch between our payments and Payrail's, by reference, sorted."""
    issues: list[Issue] = []
    for ref in sorted(ours.keys() | theirs.keys()):
        mine, payrail = ours.get(ref), theirs.get(ref)
        if payrail is None:
            issues.append(Issue(ref, "missing_at_payrail", mine, None))
        elif mine is None:
            issues.append(Issue(ref, "missing_here", None, payrail))
        else:
            if (mine.amount, mine.currency) != (payrail.amount, payrail.currency):
                issues.append(Issue(ref, "amount_differs", mine, payrail))
            if mine.status != payrail.status:
                issues.append(Issue(ref, "status_differs", mine, payrail))
    return issues


def day_to_reconcile(job: Job) -> date:
    """``day`` if the job names one, else the UTC day before ``scheduled_for`` (or today)."""
    if job.fields.get("day"):
        return date.fromisoformat(job.fields["day"])
    tick = job.fields.get("scheduled_for")
    at = datetime.fromisoformat(tick.replace("Z", "+00:00")) if tick else datetime.now(UTC)
    return at.astimezone(UTC).date() - timedelta(days=1)


def _record(item: Any, where: str) -> PaymentRecord:
    try:
        return PaymentRecord(
            reference=str(item["reference"]),
            amount=Decimal(str(item["amount"])),
            currency=str(item["currency"]),
            status=str(item["status"]),
        )
    except (KeyError, TypeError, InvalidOperation) as exc:
        raise PayrailError(f"{where}: a payment is not {{reference, amount, currency, status}}: {item!r}") from exc


async def fetch_payrail(ctx: StagedoorContext, day: date) -> dict[str, PaymentRecord]:
    """Payrail's payments of ``day``, every page, by reference."""
    url = f"{ctx.payrail()}/v1/payments"
    records: dict[str, PaymentRecord] = {}
    page: int | None = 1
    while page is not None:
        if page > MAX_PAGES:
            raise PayrailError(f"{url} still had a next page after {MAX_PAGES} pages for {day}")
        where = f"GET {url}?date={day}&page={page}"
        try:
            response = await ctx.http.get(url, params={"date": day.isoformat(), "page": page, "per_page": PAGE_SIZE})
        except httpx.HTTPError as exc:
            raise PayrailError(f"{where} failed: {exc!r}") from exc
        if response.status_code != 200:
            raise PayrailError(f"{where} answered {response.status_code}: {response.text[:200]}")
        body = response.json()
        for item in body.get("payments", []):
            record = _record(item, where)
            records[record.reference] = record
        page = body.get("next_page")
    return records


async def our_payments(conn: AsyncConnection, day: date) -> dict[str, PaymentRecord]:
    """Our payments created on ``day`` (UTC), by Payrail reference."""
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    cur = await conn.execute(
        "SELECT payrail_ref, amount, currency, status FROM payments WHERE created_at >= %s AND created_at < %s",
        (start, start + timedelta(days=1)),
    )
    return {ref: PaymentRecord(ref, amount, currency, status) for ref, amount, currency, status in await cur.fetchall()}


async def record_issues(conn: AsyncConnection, day: date, issues: list[Issue]) -> int:
    """Insert the issues not recorded yet; return how many were new."""
    new = 0
    async with conn.transaction():
        for issue in issues:
            cur = await conn.execute(
                "INSERT INTO reconciliation_issues (day, payrail_ref, issue, ours, theirs) VALUES (%s, %s, %s, %s, %s)"
                " ON CONFLICT (day, payrail_ref, issue) DO NOTHING",
                (
                    day,
                    issue.payrail_ref,
                    issue.issue,
                    Jsonb(issue.ours.as_json()) if issue.ours else None,
                    Jsonb(issue.theirs.as_json()) if issue.theirs else None,
                ),
            )
            new += cur.rowcount
    return new


@job_kind("reconcile_payments", queue=BULK)
async def reconcile_payments(job: Job) -> None:
    ctx = current()
    day = day_to_reconcile(job)
    theirs = await fetch_payrail(ctx, day)
    async with ctx.pool.connection() as conn:
        ours = await our_payments(conn, day)
        issues = compare(ours, theirs)
        new = await record_issues(conn, day, issues)
    kinds = Counter(issue.issue for issue in issues)
    log.info(
        "Reconciled %s: %d payments here, %d at Payrail, %d mismatches (%s), %d of them new.",
        day,
        len(ours),
        len(theirs),
        len(issues),
        ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())) or "none",
        new,
    )


schedule("reconcile_payments", "reconcile_payments", cron="0 3 * * *", catch_up_s=0)
