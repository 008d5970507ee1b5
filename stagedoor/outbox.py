"""The outbox relay: a chore that publishes unpublished outbox rows as jobs.

Stagedoor writes a row to ``outbox`` in the same transaction as the change
that calls for a job (an order paid, tickets rendered). The relay, in every
worker, claims up to a batch of unpublished rows with ``FOR UPDATE SKIP
LOCKED`` (so several workers relay disjoint rows), publishes them to Redis in
one pipeline, then marks them published and commits. A crash between the
publish and the commit leaves the rows unpublished and unlocked: they are
published again, never lost, and the second publish adds nothing: enqueue
remembers a producer's id (here the ``outbox_id``) for 24 h and a repeat
within that window returns the first job (``worker.store.unique``).
Handlers stay idempotent all the same (a reclaimed job runs again).

The relay publishes through the public enqueue API (``enqueue_many_async``),
so a relayed job is built like any other: ``kind``, ``attempts`` 0, the
payload's fields as strings, and ``outbox_id`` (the row's id) as its identity
in place of a minted ``job_id``, the id the worker and opslib show for it. A
row whose ``run_at`` is in the future goes to ``delayed`` with that run time.
A row written inside a request's span keeps that span's W3C context
(``traceparent``, ``tracestate`` columns) and the job carries it, so the job's
first attempt continues the request's trace, however late the relay runs.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from worker.store.enqueue import NewJob, enqueue_many_async
from worker.store.keys import Keys
from worker.store.trace_context import TRACEPARENT, TRACESTATE

log = logging.getLogger("stagedoor.outbox")

RELAY_BATCH = 100
#: How often the relay looks for rows when the last batch was not full.
RELAY_INTERVAL_S = 0.5


@dataclass(frozen=True)
class OutboxRow:
    id: int
    kind: str
    payload: dict[str, Any]
    run_at: datetime | None
    traceparent: str | None = None
    tracestate: str | None = None
    fair_key: str | None = None
    """The organizer of on-sale work (:func:`stagedoor.orders.organizer_key`): its jobs take turns with other
    organizers' (``fair_key=``); None for the rest."""

    def new_job(self, now: float) -> NewJob:
        """The row as a job for the enqueue API: the payload's values as strings (JSON for the others),
        named by ``outbox_id``; for later only when its ``run_at`` is still ahead of ``now``."""
        fields = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in self.payload.items()}
        fields["outbox_id"] = str(self.id)
        if self.traceparent:
            fields[TRACEPARENT] = self.traceparent
            if self.tracestate:
                fields[TRACESTATE] = self.tracestate
        ahead = self.run_at is not None and self.run_at.timestamp() > now
        return NewJob(self.kind, fields, run_at=self.run_at if ahead else None, fair_key=self.fair_key)


class OutboxRelay:
    """Publishes the outbox to ``jobs`` (or ``delayed``) through ``redis``."""

    def __init__(self, pool: AsyncConnectionPool, redis: Any, keys: Keys, batch: int = RELAY_BATCH) -> None:
        self.pool = pool
        self.redis = redis
        self.keys = keys
        self.batch = batch
        self._db_away = False

    async def claim(self, conn: AsyncConnection, limit: int | None = None) -> list[OutboxRow]:
        """Lock up to ``limit`` unpublished rows (inside the caller's transaction), oldest first."""
        cur = await conn.execute(
            "SELECT id, kind, payload, run_at, traceparent, tracestate, fair_key FROM outbox WHERE published_at IS NULL"
            " ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED",
            (limit or self.batch,),
        )
        return [OutboxRow(*row) for row in await cur.fetchall()]

    async def publish(self, rows: list[OutboxRow]) -> None:
        """Enqueue each row's job, to ``jobs`` or, when its ``run_at`` is ahead, to ``delayed``:
        one pipelined round trip through the public enqueue API."""
        now = time.time()
        await enqueue_many_async(self.redis, [row.new_job(now) for row in rows], prefix=self.keys.prefix)

    async def mark(self, conn: AsyncConnection, rows: list[OutboxRow]) -> None:
        """Mark the rows published (inside the caller's transaction)."""
        await conn.execute("UPDATE outbox SET published_at = now() WHERE id = ANY(%s)", ([r.id for r in rows],))

    async def relay_once(self) -> int:
        """Claim, publish and mark one batch; return how many rows were published."""
        async with self.pool.connection() as conn, conn.transaction():
            rows = await self.claim(conn)
            if not rows:
                return 0
            await self.publish(rows)
            await self.mark(conn, rows)
        log.info("Published %d outbox rows as jobs (outbox ids %d to %d).", len(rows), rows[0].id, rows[-1].id)
        return len(rows)

    async def run(self) -> float | None:
        """The chore: relay a batch; come back at once while batches are full."""
        return 0.0 if await self.relay_once() == self.batch else None

    async def has_unpublished(self) -> bool:
        """True while some row waits for the relay (``--burst`` does not exit before), and
        while PostgreSQL does not answer: unknown is not "drained"."""
        try:
            async with self.pool.connection() as conn:
                cur = await conn.execute("SELECT EXISTS (SELECT 1 FROM outbox WHERE published_at IS NULL)")
                row = await cur.fetchone()
        except (psycopg.OperationalError, PoolTimeout) as exc:
            if not self._db_away:
                log.warning("Cannot tell whether the outbox is drained (%s); waiting for PostgreSQL.", exc)
            self._db_away = True
            return True
        self._db_away = False
        return bool(row and row[0])
