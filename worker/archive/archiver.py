"""The archiver: every dead entry into PostgreSQL before the dead stream's cap may trim it.

Chores in every worker while the archive is on (``ARCHIVE_URL`` not ``off``),
each over every partition of the queue (each has its own ``jobs:dead``, group
``archive`` and ``jobs:dead:log``; rows carry the partition):

``archive`` (every 0.5 s)
    1. applies the records of ``jobs:dead:log`` (replays, discards, replayed
       jobs' outcomes) to the ``dead_letters`` rows, in order, under a
       transaction-scoped advisory lock so one worker applies them at a time,
       then trims the records it applied;
    2. reads consumer group ``archive`` on ``jobs:dead``: first the entries
       it was given and did not acknowledge (its own pending), after taking
       over those idle beyond ``RECLAIM_IDLE_MS`` in a dead worker's name
       (XAUTOCLAIM), then new ones; each batch is one transaction of
       ``INSERT ... ON CONFLICT DO NOTHING``, then XACK. A worker killed
       between the commit and the XACK leaves the batch pending; whoever reads
       it again inserts nothing twice.

``trim-dead`` (every 1 s)
    keeps ``jobs:dead`` near ``DEAD_MAXLEN`` by removing only entries the
    group acknowledged (``worker/store/lua/trim_dead.lua``); while PostgreSQL is away
    the stream grows until bury's ``MAXLEN ~ DEAD_HARD_MAXLEN`` evicts, counts
    (``jobs:dead:evicted``), and this chore logs it.

``forget-archive-consumers`` (every 60 s)
    removes dead workers' consumers from group ``archive`` once they own
    nothing, as the ``forget-consumers`` chore does for group ``workers``.

``archive-months`` (every 10 min)
    keeps the coming months' partitions ready and applies ``ARCHIVE_RETENTION``
    (:mod:`worker.archive.retention`).

PostgreSQL away: the chore counts the error, drops its connection and tries
again with backoff; nothing in Redis waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import redis.asyncio as aioredis
import redis.exceptions
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from worker.app import Chore
from worker.archive.dead_log import next_id, parse_record
from worker.archive.retention import Retention
from worker.archive.rows import INSERT_ROW, LOG_LOCK, TRY_LOG_LOCK, Statement, dead_row, record_statements, runs
from worker.archive.schema_check import NotMigrated, check_async
from worker.archive.table import MIGRATE_COMMAND, WANTED, migrate_async
from worker.redact import one_line
from worker.settings import Settings
from worker.store.consumers import forget_dead_consumers
from worker.store.keys import ARCHIVE_GROUP, Keys
from worker.store.partitions import served_keys
from worker.store.scripts import Scripts
from worker.store.wire import text

log = logging.getLogger("worker.archive")

BATCH = 500
"""Dead entries per transaction, and log records read per round trip."""
BATCHES_PER_RUN = 20
"""A run archives at most this many batches, then yields to the other chores (and runs again at once)."""
INTERVAL_S = 0.5
TRIM_INTERVAL_S = 1.0
FORGET_INTERVAL_S = 60.0
TRIM_STEP = 1000
"""``trim-dead`` removes at most this many entries per script call (each call reads them)."""
CONNECT_TIMEOUT_S = 5
FINAL_RUN_S = 5.0
COUNT_LIMIT = 10_000
"""Undelivered entries are counted by XRANGE up to this many where Redis cannot report the group's lag."""


class ArchiveUnavailable(ConnectionError):
    """PostgreSQL did not answer or dropped the connection (the chore backs off and retries)."""


@dataclass(frozen=True)
class ArchiveBacklog:
    """What has not reached PostgreSQL yet: dead entries the group has not acknowledged, log
    records not applied, and the age of the oldest of them (0 when there is none)."""

    dead: int
    log: int
    oldest_s: float
    dead_added: int | None = None
    """Entries ever added to ``jobs:dead`` (XINFO STREAM ``entries-added``; None before Redis 7): it
    keeps rising at the cap, where the length stays flat while archived entries are trimmed."""


async def read_archive_backlog(client: Any, keys: Keys, now: float) -> ArchiveBacklog:
    """Read the backlog in one pipelined round trip (plus a count where Redis gives no lag).

    ``client`` is an asyncio Redis client (typed ``Any``: redis-py types each reply as the union
    of every shape a command can return, which this parses anyway).
    """
    pipe = client.pipeline(transaction=False)
    pipe.xinfo_groups(keys.dead)
    pipe.xpending(keys.dead, ARCHIVE_GROUP)
    pipe.xrange(keys.dead, count=1)
    pipe.xlen(keys.dead)
    pipe.xlen(keys.dead_log)
    pipe.xrange(keys.dead_log, count=1)
    pipe.xinfo_stream(keys.dead)
    replies = await pipe.execute(raise_on_error=False)
    groups, pending, first_dead, dead_length, log_length, first_record, stream = replies
    group = None
    if isinstance(groups, list):
        group = next((g for g in groups if text(g["name"]) == ARCHIVE_GROUP), None)
    oldest: list[str] = []
    if group is None:  # no archiver has run: everything in jobs:dead waits
        dead = int(dead_length) if isinstance(dead_length, int) else 0
        if first_dead and isinstance(first_dead, list):
            oldest.append(text(first_dead[0][0]))
    else:
        last = text(group["last-delivered-id"])
        undelivered = await client.xrange(keys.dead, min=f"({last}", max="+", count=1)
        lag = group.get("lag")
        if lag is None:
            lag = len(await client.xrange(keys.dead, min=f"({last}", max="+", count=COUNT_LIMIT)) if undelivered else 0
        dead = int(group["pending"]) + int(lag)
        if int(group["pending"]) and isinstance(pending, dict) and pending.get("min"):
            oldest.append(text(pending["min"]))
        if undelivered:
            oldest.append(text(undelivered[0][0]))
    if first_record and isinstance(first_record, list):
        oldest.append(text(first_record[0][0]))
    age = max((now - int(entry_id.partition("-")[0]) / 1000 for entry_id in oldest), default=0.0)
    added = stream.get("entries-added") if isinstance(stream, dict) else None
    return ArchiveBacklog(
        dead=dead,
        log=int(log_length) if isinstance(log_length, int) else 0,
        oldest_s=max(0.0, age),
        dead_added=None if added is None else int(added),
    )


async def read_partitions_backlog(client: Any, parts: list[Keys], now: float) -> ArchiveBacklog:
    """:func:`read_archive_backlog` of every partition, added up (the oldest age: the longest)."""
    each = [await read_archive_backlog(client, keys, now) for keys in parts]
    if len(each) == 1:
        return each[0]
    added = [b.dead_added for b in each]
    return ArchiveBacklog(
        dead=sum(b.dead for b in each),
        log=sum(b.log for b in each),
        oldest_s=max(b.oldest_s for b in each),
        dead_added=None if None in added else sum(a or 0 for a in added),
    )


def _entries(reply: Any) -> list[tuple[str, dict[bytes, bytes] | None]]:
    """The entries of an XREADGROUP reply on one stream (RESP2 list or RESP3 dict); the fields of
    an entry deleted since it was delivered (replayed, discarded, evicted) are None."""
    if not reply:
        return []
    per_stream = next(iter(reply.values())) if isinstance(reply, dict) else reply[0][1]
    return [(text(entry_id), fields or None) for entry_id, fields in per_stream]


class Archiver:
    """The archive and trim-dead chores of one worker, and the counts it exports."""

    def __init__(
        self, client: aioredis.Redis, settings: Settings, dsn: Callable[[], str], *, migrate: bool = False
    ) -> None:
        self.redis: Any = client
        self.settings = settings
        self.dsn = dsn
        self.migrate = migrate
        """Create the table at start (``ARCHIVE_MIGRATE``), rather than check that it exists."""
        self.parts = served_keys(settings)
        """The partitions of every queue this worker serves (each queue is archived by the workers serving it)."""
        self.queue = settings.prefix
        self.name = settings.worker_name
        self.conn: psycopg.AsyncConnection[Any] | None = None
        self.archived = 0
        self.applied = 0
        self.errors = 0
        self.failing = False
        self._evicted_seen: dict[str, int] = {}
        self._groups_ready = False
        self._migrated = False
        self.scripts = [Scripts(client, keys) for keys in self.parts]

    def chores(self) -> list[Chore]:
        return [
            Chore("archive", INTERVAL_S, self.run),
            Chore("trim-dead", TRIM_INTERVAL_S, self.trim),
            Chore("forget-archive-consumers", FORGET_INTERVAL_S, self.forget_consumers),
            *(Retention(self.settings, self.dsn, keys).chore() for keys in self.parts if keys.partition == 0),
        ]

    async def start(self) -> None:
        """Check the table (or create it, with ``migrate``) and create the consumer group. PostgreSQL away
        is not fatal: dead entries wait in ``jobs:dead`` and the chore checks once it answers. A missing
        table is: :class:`~worker.archive.schema_check.NotMigrated` names the command that creates it."""
        try:
            await self._connection()
        except ArchiveUnavailable as exc:
            log.warning("The archive's PostgreSQL does not answer (%s); dead entries wait in jobs:dead.", exc)
        await self._ensure_groups()

    # ------------------------------------------------------------------ chores

    async def run(self) -> float | None:
        """Apply the log, archive what the group holds; 0 (run again at once) when there was more."""
        try:
            conn = await self._connection()
            applied = await self._apply_log(conn)
            archived, more = await self._archive(conn)
        except psycopg.errors.DeadlockDetected:
            # Rolled back; nothing was acknowledged or trimmed. The next run (at once) does it again.
            self.errors += 1
            log.info("An archive transaction was chosen as a deadlock victim; running it again.")
            return 0.0
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            await self._lost()
            raise ArchiveUnavailable(f"PostgreSQL of the archive: {one_line(exc)}") from None
        except psycopg.Error:
            await self._lost()
            raise
        self.failing = False
        self.applied += applied
        self.archived += archived
        return 0.0 if more else None

    async def trim(self) -> None:
        """Trim archived entries beyond DEAD_MAXLEN; log evictions by the hard ceiling."""
        for scripts in self.scripts:
            for _ in range(BATCHES_PER_RUN):
                removed, evicted = await scripts.trim_dead(self.settings.dead_maxlen, TRIM_STEP)
                self._saw_evicted(scripts.keys, int(evicted))
                if removed < TRIM_STEP:
                    break

    async def forget_consumers(self) -> None:
        """Remove dead workers' consumers from group ``archive`` once they own nothing (as for ``workers``)."""
        for scripts in self.scripts:
            await forget_dead_consumers(
                self.redis,
                scripts,
                stream=scripts.keys.dead,
                group=ARCHIVE_GROUP,
                min_idle_ms=max(self.settings.reclaim_idle_ms, 60_000),
            )

    async def has_work(self) -> bool:
        """Burst mode: entries or records wait for the archive (and the archive answers)."""
        if self.failing:
            return False
        backlog = await read_partitions_backlog(self.redis, self.parts, time.time())
        return bool(backlog.dead or backlog.log)

    async def close(self) -> None:
        """A last run (best effort, bounded by FINAL_RUN_S whatever PostgreSQL does: the outcomes the worker
        flushed while stopping reach the archive now rather than at another worker's next run), then the close."""
        if not self.failing and not await finished_within(self.run(), FINAL_RUN_S):
            drop(self.conn)
            self.conn = None
        await self._close()

    # ---------------------------------------------------------------- the log

    async def _apply_log(self, conn: psycopg.AsyncConnection[Any]) -> int:
        """Apply every record of each partition's log in one transaction under the queue's log lock;
        trim them after the commit."""
        applied, last = 0, {}
        async with conn.transaction():
            cur = await conn.execute(TRY_LOG_LOCK, (LOG_LOCK, self.queue))
            row = await cur.fetchone()
            if not row or not row[0]:
                return 0  # another worker (or an opslib replay) is applying the log now
            for keys in self.parts:
                start = "-"
                for _ in range(BATCHES_PER_RUN):
                    raw = await self.redis.xrange(keys.dead_log, min=start, max="+", count=BATCH)
                    if not raw:
                        break
                    records = [parse_record(record_id, fields) for record_id, fields in raw]
                    await _run(conn, record_statements(keys.queue_prefix, keys.partition, records))
                    applied += len(records)
                    last[keys.dead_log] = records[-1].record_id
                    start = f"({records[-1].record_id}"
                    if len(raw) < BATCH:
                        break
        for log_key, record_id in last.items():
            await self.redis.xtrim(log_key, minid=next_id(record_id), approximate=False)
        return applied

    # ----------------------------------------------------------- dead entries

    async def _archive(self, conn: psycopg.AsyncConnection[Any]) -> tuple[int, bool]:
        """Archive what each partition's group holds; (entries archived, whether any partition has more)."""
        await self._ensure_groups()
        archived, more = 0, False
        for keys in self.parts:
            count, left = await self._archive_partition(conn, keys)
            archived += count
            more = more or left
        return archived, more

    async def _archive_partition(self, conn: psycopg.AsyncConnection[Any], keys: Keys) -> tuple[int, bool]:
        await self._take_over_idle(keys)
        archived = 0
        for _ in range(BATCHES_PER_RUN):
            entries = await self._read(keys, "0")  # ours, not acknowledged: a failed commit or a taken-over batch
            if not entries:
                entries = await self._read(keys, ">")
            if not entries:
                return archived, False
            rows = [
                dead_row(keys.queue_prefix, keys.partition, entry_id, list(fields.items()))
                for entry_id, fields in entries
                if fields
            ]
            if rows:
                async with conn.transaction(), conn.cursor() as cur:
                    await cur.executemany(INSERT_ROW, rows)
            await self.redis.xack(keys.dead, ARCHIVE_GROUP, *[entry_id for entry_id, _ in entries])
            archived += len(rows)
        return archived, True

    async def _read(self, keys: Keys, start: str) -> list[tuple[str, dict[bytes, bytes] | None]]:
        try:
            reply = await self.redis.xreadgroup(ARCHIVE_GROUP, self.name, {keys.dead: start}, count=BATCH)
        except redis.exceptions.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self._groups_ready = False
            await self._ensure_groups()
            return []
        return _entries(reply)

    async def _take_over_idle(self, keys: Keys) -> None:
        """Take over entries a dead worker was archiving (idle beyond RECLAIM_IDLE_MS)."""
        await self.redis.xautoclaim(
            keys.dead,
            ARCHIVE_GROUP,
            self.name,
            min_idle_time=self.settings.reclaim_idle_ms,
            start_id="0-0",
            count=BATCH,
            justid=True,
        )

    async def _ensure_groups(self) -> None:
        if self._groups_ready:
            return
        for keys in self.parts:
            try:
                await self.redis.xgroup_create(keys.dead, ARCHIVE_GROUP, id="0", mkstream=True)
            except redis.exceptions.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
        self._groups_ready = True

    # ------------------------------------------------------------- PostgreSQL

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self.conn is not None and not self.conn.closed:
            return self.conn
        try:
            conn = await psycopg.AsyncConnection.connect(self.dsn(), connect_timeout=CONNECT_TIMEOUT_S)
            if not self._migrated:
                try:
                    await (migrate_async(conn) if self.migrate else check_async(conn, WANTED, MIGRATE_COMMAND))
                except psycopg.errors.InsufficientPrivilege as exc:
                    await conn.close()
                    raise NotMigrated(
                        f"ARCHIVE_MIGRATE=on, but the archive's PostgreSQL role may not run DDL "
                        f"({one_line(exc)}); run `{MIGRATE_COMMAND}` as a role that may, "
                        "and start the workers with ARCHIVE_MIGRATE=off"
                    ) from None
                except BaseException:
                    await conn.close()
                    raise
                self._migrated = True
        except psycopg.OperationalError as exc:
            await self._lost()
            raise ArchiveUnavailable(one_line(exc)) from None
        self.conn = conn
        return conn

    async def _lost(self) -> None:
        """Count the failure, drop the connection (the next run opens a new one); burst mode stops waiting."""
        self.errors += 1
        self.failing = True
        await self._close()

    async def _close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(psycopg.Error):
                await self.conn.close()
            self.conn = None

    def _saw_evicted(self, keys: Keys, evicted: int) -> None:
        seen = self._evicted_seen.get(keys.dead)
        if seen is not None and evicted > seen:
            log.error(
                "%d dead entries were evicted from %s by DEAD_HARD_MAXLEN=%d before they were archived "
                "(%d in all): is the archive's PostgreSQL away?",
                evicted - seen,
                keys.dead,
                self.settings.dead_ceiling,
                evicted,
            )
        self._evicted_seen[keys.dead] = evicted


async def _run(conn: psycopg.AsyncConnection[Any], statements: Iterable[Statement]) -> None:
    async with conn.cursor() as cur:
        for sql, params in runs(statements):
            await cur.executemany(sql, params)


class ArchiveCollector(Collector):
    """This process's archive counts, and the queue-wide backlog the metrics lock holder reads."""

    def __init__(self, queue: str, namespace: str, archiver: Archiver) -> None:
        self.queue = queue
        self.namespace = namespace
        self.archiver = archiver
        self.backlog: ArchiveBacklog | None = None

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        q, ns = self.queue, self.namespace
        archived = CounterMetricFamily(
            f"{ns}_archive_archived", "Dead entries this worker wrote to the archive.", labels=["queue"]
        )
        archived.add_metric([q], self.archiver.archived)
        errors = CounterMetricFamily(
            f"{ns}_archive_errors",
            "Archive runs of this worker that failed (PostgreSQL away or refusing); they are retried.",
            labels=["queue"],
        )
        errors.add_metric([q], self.archiver.errors)
        yield from (archived, errors)
        backlog = self.backlog
        if backlog is None:
            return
        unarchived = GaugeMetricFamily(
            f"{ns}_archive_unarchived",
            "Dead entries not yet in the archive, plus replay/discard/outcome records not yet applied to it.",
            labels=["queue"],
        )
        unarchived.add_metric([q], backlog.dead + backlog.log)
        oldest = GaugeMetricFamily(
            f"{ns}_archive_oldest_unarchived_age_seconds",
            "Age of the oldest dead entry or record not yet in the archive (0 when none).",
            labels=["queue"],
        )
        oldest.add_metric([q], backlog.oldest_s)
        yield from (unarchived, oldest)
        if backlog.dead_added is not None:
            added = CounterMetricFamily(
                f"{ns}_archive_dead_added",
                "Entries ever added to jobs:dead: it rises at each dead letter, also at the DEAD_MAXLEN cap, where "
                "the length stays flat while archived entries are trimmed.",
                labels=["queue"],
            )
            added.add_metric([q], backlog.dead_added)
            yield added


async def finished_within(call: Awaitable[Any], timeout_s: float) -> bool:
    """Await ``call`` up to ``timeout_s``; True when it finished (its error ignored: a best effort). One still
    running then is cancelled and left, not awaited: psycopg's cancel request, then its close, would each
    wait on a frozen server (SIGTERM took 15 s against a 5 s grace)."""
    task = asyncio.ensure_future(call)
    await asyncio.wait({task}, timeout=timeout_s)
    task.add_done_callback(lambda done: done.cancelled() or done.exception())
    if task.done():
        return True
    task.cancel()
    log.warning("The archive's last run did not finish within %g s; closing without it.", timeout_s)
    return False


def drop(conn: psycopg.AsyncConnection[Any] | None) -> None:
    """Close ``conn``'s socket at once, without a word to a server that may not answer."""
    if conn is not None:
        conn.pgconn.finish()
