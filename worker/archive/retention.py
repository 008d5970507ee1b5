"""The ``archive-months`` chore: partitions ready for the coming months, and ``ARCHIVE_RETENTION`` applied.

Every worker with the archive on runs it (every :data:`INTERVAL_S`); one at a
time per queue does the work (``pg_try_advisory_lock``), the others skip that
run. Each run, in short transactions of its own, each waiting at most
:data:`LOCK_TIMEOUT` for a lock (a partition's drop needs the table's lock a
few milliseconds: never a long one, and never a long queue behind it):

1. makes the partitions of this month and the next ones that are missing
   (``archive_ready_month``, :mod:`worker.archive.months`);
2. drops each past month's partition whose every row is past its retention
   (and that holds rows of this queue only): milliseconds, whatever its size,
   and nothing left behind for VACUUM;
3. deletes the rest that is past retention in batches of :data:`BATCH` rows,
   at most :data:`BATCHES_PER_RUN` a run (then runs again at once).

A row's age is counted from the month column (``dead_at``, or the action's
``at``), so a month becomes droppable as a whole as soon as its last instant
is older than the longest retention of the statuses it holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from worker.app import Chore
from worker.archive.actions_table import ACTIONS_TABLE
from worker.archive.months import month_start, ready_statements
from worker.archive.table import MIGRATE_COMMAND, STATUS_DEAD, STATUS_DISCARDED, STATUS_REPLAYED, TABLE
from worker.redact import one_line
from worker.settings import Settings
from worker.store.keys import Keys
from worker.store.queues import DEFAULT_QUEUE

log = logging.getLogger("worker.archive")

INTERVAL_S = 600.0
BATCH = 1000
BATCHES_PER_RUN = 20
LOCK_TIMEOUT = "200ms"
CONNECT_TIMEOUT_S = 5
PRUNE_LOCK = 514_720_031
"""First key of ``pg_try_advisory_lock(PRUNE_LOCK, hashtext(queue))``: one pruner of a queue at a time."""


@dataclass(frozen=True)
class Kept:
    """One table as retention sees it: its month column, its key, and its groups of rows (the retention
    key of ``ARCHIVE_RETENTION`` and the SQL condition that selects the group's rows)."""

    table: str
    column: str
    key: tuple[str, ...]
    groups: tuple[tuple[str, str], ...]


KEPT = (
    Kept(
        TABLE,
        "dead_at",
        ("queue", "partition", "dead_id", "dead_at"),
        tuple((status, f"status = '{status}'") for status in (STATUS_DEAD, STATUS_REPLAYED, STATUS_DISCARDED)),
    ),
    Kept(ACTIONS_TABLE, "at", ("queue", "id", "at"), (("actions", "true"),)),
)

MONTHS_OF = """
SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass(%s) AND c.relname ~ '_p[0-9]{6}$' ORDER BY c.relname
"""


class Retention:
    """The ``archive-months`` chore of one worker for one named queue (``keys``: any of its partitions'; none:
    ``default``): the archive's rows of that queue are those whose ``queue`` is its key prefix."""

    def __init__(self, settings: Settings, dsn: Callable[[], str], keys: Keys | None = None) -> None:
        self.keys = keys or Keys(settings.prefix)
        self.queue = self.keys.queue_prefix
        self.ages = dict(settings.archive_retention)
        self.dsn = dsn
        self.dropped = 0
        self.deleted = 0
        self._said_unmigrated = False

    def chore(self) -> Chore:
        named = "" if self.keys.queue == DEFAULT_QUEUE else f" ({self.keys.queue})"
        return Chore(f"archive-months{named}", INTERVAL_S, self.run)

    async def run(self, now: datetime | None = None) -> float | None:
        """One run at ``now`` (the clock by default); 0 (again at once) when batches were left."""
        now = now or datetime.now(UTC)
        try:
            async with await psycopg.AsyncConnection.connect(
                self.dsn(), autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
            ) as conn:
                return await self._locked_run(conn, now)
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            # The archive's PostgreSQL away, or the session ended under us (a restart, a rotated password's
            # pg_terminate_backend): the chore backs off and says so in one line, as the archive does.
            raise ConnectionError(f"PostgreSQL of the archive: {one_line(exc)}") from None

    async def _locked_run(self, conn: psycopg.AsyncConnection[Any], now: datetime) -> float | None:
        """The run under the queue's advisory lock (None at once when another worker holds it). The lock
        is the session's: a session that ended has released it, so the unlock is only for an open one."""
        lock = (PRUNE_LOCK, self.queue)
        if not await _one(conn, "SELECT pg_try_advisory_lock(%s::int4, hashtext(%s))", lock):
            return None
        try:
            if not await self._ready(conn, now):
                return None
            more = False
            for kept in KEPT:
                await self._drop_months(conn, kept, now)
                more = await self._delete_batches(conn, kept, now) or more
        finally:
            if not conn.closed:
                await conn.execute("SELECT pg_advisory_unlock(%s::int4, hashtext(%s))", lock)
        return 0.0 if more else None

    async def _ready(self, conn: psycopg.AsyncConnection[Any], now: datetime) -> bool:
        """Make the coming months' partitions; False (said once) when the tables are not migrated for it."""
        try:
            for sql, params in ready_statements(now):
                async with conn.transaction():
                    await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                    await conn.execute(sql, params)
        except (psycopg.errors.UndefinedFunction, psycopg.errors.UndefinedTable) as exc:
            if not self._said_unmigrated:
                log.error(
                    "The archive is not partitioned by month yet (%s): run `%s` as the migrator; "
                    "ARCHIVE_RETENTION waits until then.",
                    one_line(exc),
                    MIGRATE_COMMAND,
                )
                self._said_unmigrated = True
            return False
        return True

    async def _drop_months(self, conn: psycopg.AsyncConnection[Any], kept: Kept, now: datetime) -> None:
        for (name,) in await (await conn.execute(MONTHS_OF, (kept.table,))).fetchall():
            month = datetime.strptime(name[-6:], "%Y%m").replace(tzinfo=UTC)
            end = month_start(month, 1)
            if end <= now and await self._all_past(conn, kept, month, end, now):
                async with conn.transaction():
                    await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                    await conn.execute("SELECT archive_drop_month(%s, %s)", (kept.table, month))
                self.dropped += 1
                log.info("Dropped %s: every row of %s of it was past ARCHIVE_RETENTION.", name, kept.table)

    async def _all_past(
        self, conn: psycopg.AsyncConnection[Any], kept: Kept, month: datetime, end: datetime, now: datetime
    ) -> bool:
        """Whether every row of the month ``[month, end)`` is this queue's and past its group's retention."""
        within = f"{kept.column} >= %s AND {kept.column} < %s"
        for other in ("queue < %s", "queue > %s"):
            if await _one(
                conn, f"SELECT EXISTS (SELECT 1 FROM {kept.table} WHERE {other} AND {within})", (self.queue, month, end)
            ):
                return False
        for group, condition in kept.groups:
            age = self.ages.get(group)
            if age is not None and end <= now - timedelta(seconds=age):
                continue
            sql = f"SELECT EXISTS (SELECT 1 FROM {kept.table} WHERE queue = %s AND {condition} AND {within})"
            if await _one(conn, sql, (self.queue, month, end)):
                return False
        return True

    async def _delete_batches(self, conn: psycopg.AsyncConnection[Any], kept: Kept, now: datetime) -> bool:
        """Delete past-retention rows in batches; True when this run's allowance ran out before they did."""
        key = ", ".join(kept.key)
        budget = BATCHES_PER_RUN
        for group, condition in kept.groups:
            age = self.ages.get(group)
            if age is None:
                continue
            sql = (
                f"DELETE FROM {kept.table} WHERE ({key}) IN (SELECT {key} FROM {kept.table}"
                f" WHERE queue = %s AND {condition} AND {kept.column} < %s LIMIT {BATCH})"
            )
            while True:
                if budget == 0:
                    return True
                budget -= 1
                async with conn.transaction():
                    await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                    deleted = (await conn.execute(sql, (self.queue, now - timedelta(seconds=age)))).rowcount
                self.deleted += deleted
                if deleted < BATCH:
                    break
        return False


async def _one(conn: psycopg.AsyncConnection[Any], sql: str, params: tuple[Any, ...]) -> Any:
    row = await (await conn.execute(sql, params)).fetchone()
    return row[0] if row else None
