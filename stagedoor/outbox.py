"""The outbox relay: a chore that publishes unpublished outbox rows as jobs.

Stagedoor writes a row to ``outbox`` in the same transaction as the change
that calls for a job (an order paid, tickets rendered). The relay, in every
worker, claims up to a batch of unpublished rows with ``FOR UPDATE SKIP
LOCKED`` (so several workers relay disjoint rows), publishes them to Redis in
one pipeline, then marks them published and commits. A crash between the
publish and the commit leaves the rows unpublished and unlocked: they are
published again (handlers are idempotent), never lost.

A row becomes a job with ``kind``, ``outbox_id`` (in place of a minted
``job_id``), ``attempts`` 0 and the payload's fields as strings. A row whose
``run_at`` is in the future goes to ``delayed`` with that run time.
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

from worker.keys import Keys
from worker.wire import encode_member

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

    def job(self) -> dict[str, str]:
        """The row as a job's flat string fields."""
        fields = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in self.payload.items()}
        fields.update(kind=self.kind, outbox_id=str(self.id), attempts="0")
        return fields


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
            "SELECT id, kind, payload, run_at FROM outbox WHERE published_at IS NULL"
            " ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED",
            (limit or self.batch,),
        )
        return [OutboxRow(*row) for row in await cur.fetchall()]

    async def publish(self, rows: list[OutboxRow]) -> None:
        """Add each row's job to ``jobs``, or to ``delayed`` when its ``run_at`` is ahead."""
        now = time.time()
        pipe = self.redis.pipeline(transaction=False)
        for row in rows:
            due = row.run_at.timestamp() if row.run_at is not None else None
            if due is not None and due > now:
                pipe.zadd(self.keys.delayed, {encode_member(row.job()): due})
            else:
                pipe.xadd(self.keys.jobs, row.job())
        await pipe.execute()

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
