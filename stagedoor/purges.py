"""purge_idempotency_keys (hourly) and purge_outbox (nightly): keep two tables small.

Idempotency keys older than 24 hours can no longer match a retried request.
Outbox rows published more than 7 days ago are deleted in batches of 1,000,
each batch its own transaction, so a purge after a busy week never holds a
long lock on the table the checkout writes to. Both are plain deletes by age:
run twice, the second run deletes nothing.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from psycopg import AsyncConnection

from stagedoor.context import current
from stagedoor.queues import BULK
from worker import Job, job_kind, schedule

log = logging.getLogger("stagedoor.purges")

IDEMPOTENCY_KEY_TTL = timedelta(hours=24)
OUTBOX_KEEP = timedelta(days=7)
OUTBOX_BATCH = 1000


async def purge_keys(conn: AsyncConnection, older_than: timedelta = IDEMPOTENCY_KEY_TTL) -> int:
    """Delete idempotency keys created more than ``older_than`` ago; return how many."""
    cur = await conn.execute("DELETE FROM idempotency_keys WHERE created_at < now() - %s", (older_than,))
    return cur.rowcount


async def purge_published(
    conn: AsyncConnection, older_than: timedelta = OUTBOX_KEEP, batch: int = OUTBOX_BATCH
) -> list[int]:
    """Delete outbox rows published more than ``older_than`` ago, ``batch`` rows per
    transaction, until none remain; return the size of each batch."""
    sizes: list[int] = []
    while True:
        async with conn.transaction():
            cur = await conn.execute(
                "DELETE FROM outbox WHERE id IN ("
                " SELECT id FROM outbox WHERE published_at < now() - %s ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED)",
                (older_than, batch),
            )
        if cur.rowcount:
            sizes.append(cur.rowcount)
        if cur.rowcount < batch:
            return sizes


@job_kind("purge_idempotency_keys", queue=BULK)
async def purge_idempotency_keys(job: Job) -> None:
    async with current().pool.connection() as conn:
        deleted = await purge_keys(conn)
    log.info("Purged %d idempotency keys older than 24 hours (job %s).", deleted, job.job_id)


@job_kind("purge_outbox", queue=BULK)
async def purge_outbox(job: Job) -> None:
    async with current().pool.connection() as conn:
        sizes = await purge_published(conn)
    log.info(
        "Purged %d outbox rows published more than 7 days ago, in %d batches (job %s).",
        sum(sizes),
        len(sizes),
        job.job_id,
    )


schedule("purge_idempotency_keys", "purge_idempotency_keys", cron="0 * * * *")
schedule("purge_outbox", "purge_outbox", cron="30 3 * * *")
