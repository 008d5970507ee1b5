"""Moves of dead letters that only the archive still holds (``jobs:dead`` was trimmed of them).

A replay or a discard takes each id from ``jobs:dead`` first (one Lua script
each, which records the move in ``jobs:dead:log``). An id the stream no
longer holds may still be ``dead`` in the archive; it is taken there, in one
PostgreSQL transaction that

1. holds the queue's log lock (``pg_advisory_xact_lock``, the one the
   archiver tries), so no one else applies the log meanwhile;
2. applies the log's records first: a discard or replay of the same entry
   that left the stream a moment ago is in the row before the row is looked
   at;
3. takes the rows with ``UPDATE ... WHERE status = 'dead' RETURNING``, so of
   two people taking the same entry, one gets it and the other sees it gone.

A replay re-adds the job inside that transaction (``replay_archived.lua``,
which also records the move in the log, in case the commit is lost).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pandas as pd
import psycopg
import redis

from opslib.bounded import every_entry
from opslib.connection import archive_url, connect_postgres, partitions, redis_session, settings
from opslib.errors import OpslibError
from opslib.times import parse_since
from worker.archive.dead_log import EVENT_DISCARDED, EVENT_REPLAYED, next_id, parse_record
from worker.archive.rows import LOG_LOCK, TAKE_LOG_LOCK, record_statements, runs
from worker.archive.table import STATUS_DEAD, STATUS_DISCARDED, STATUS_REPLAYED, TABLE, fields_from_json
from worker.redact import one_line
from worker.store.keys import Keys
from worker.store.scripts import Scripts
from worker.store.trace_context import TRACE_FIELDS, TRACE_LINK, TRACEPARENT, add_links
from worker.store.wire import DEAD_FIELDS, text

LOG_PAGE = 500

_WHERE_DEAD = f"queue = %s AND partition = %s AND dead_id = ANY(%s) AND status = '{STATUS_DEAD}'"
TAKE_FOR_REPLAY = (
    f"UPDATE {TABLE} SET status = '{STATUS_REPLAYED}', replayed_at = %s::timestamptz, replay_batch = %s,"
    f" replayed_by = %s WHERE {_WHERE_DEAD} RETURNING dead_id, fields"
)
SET_NEW_ID = f"UPDATE {TABLE} SET replay_new_id = %s WHERE queue = %s AND partition = %s AND dead_id = %s"
TAKE_FOR_DISCARD = (
    f"UPDATE {TABLE} SET status = '{STATUS_DISCARDED}', discarded_at = %s::timestamptz, discarded_by = %s,"
    f" discard_reason = %s, discard_batch = %s WHERE {_WHERE_DEAD} RETURNING dead_id"
)
STILL_DEAD = f"SELECT dead_id FROM {TABLE} WHERE {_WHERE_DEAD}"
#: Where the archive holds ids as ``dead``, whatever their queue and partition: (dead_id, queue, partition) rows.
DEAD_ANYWHERE = (
    f"SELECT dead_id, queue, partition FROM {TABLE} "
    f"WHERE queue = ANY(%s) AND dead_id = ANY(%s) AND status = '{STATUS_DEAD}'"
)


class Archive:
    """The archive's connection for one call: opened when first needed, closed by the caller.

    ``conn`` is a psycopg connection (the caller's, left open), a URL, or None
    for the environment (``ARCHIVE_URL``, else ``DATABASE_URL`` or the
    ``make run`` stack). ``enabled`` is False with ``ARCHIVE_URL=off`` and no
    ``conn``: there is no archive, and only ``jobs:dead`` is looked at.
    """

    def __init__(self, conn: Any = None) -> None:
        self._given = conn if isinstance(conn, psycopg.Connection) else None
        self._url = conn if isinstance(conn, str) else None
        self.enabled = conn is not None or settings().archive_on
        self._own: psycopg.Connection[Any] | None = None
        self._has_table: bool | None = None

    def connection(self) -> psycopg.Connection[Any] | None:
        """The connection, or None when the archive has no table yet (no worker archived anything:
        it holds nothing); an :class:`OpslibError` when PostgreSQL does not answer."""
        if self._given is not None:
            conn = self._given
        elif self._own is not None:
            conn = self._own
        else:
            conn = self._own = connect_postgres(
                self._url or archive_url() or "",
                autocommit=True,
                failure=lambda shown, exc: (
                    f"the archive's PostgreSQL at {shown} does not answer ({one_line(exc)}); "
                    "nothing was changed. Set ARCHIVE_URL (or DATABASE_URL) to the archive the workers use, "
                    "or pass conn="
                ),
            )
        if self._has_table is None:
            found = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (TABLE,)).fetchone()
            self._has_table = bool(found and found[0])
        return conn if self._has_table else None

    def close(self) -> None:
        if self._own is not None:
            self._own.close()
            self._own = None


@contextlib.contextmanager
def open_archive(conn: Any = None) -> Iterator[Archive]:
    archive = Archive(conn)
    try:
        yield archive
    except psycopg.Error as exc:
        raise OpslibError(f"the archive refused: {one_line(exc)}") from None
    finally:
        archive.close()


@contextlib.contextmanager
def under_log_lock(conn: psycopg.Connection[Any], client: Any, keys: Keys) -> Iterator[None]:
    """A transaction holding the queue's log lock, with the log of ``keys``' partition applied first;
    the applied records are trimmed from its ``jobs:dead:log`` after the commit."""
    last = None
    with conn.transaction():
        conn.execute(TAKE_LOG_LOCK, (LOG_LOCK, keys.prefix))
        # Up to the newest record now: every move that took an entry from jobs:dead before the caller
        # found it gone is there. Records added meanwhile concern entries this call does not take.
        newest = client.xrevrange(keys.dead_log, count=1)
        end = text(newest[0][0]) if newest else None
        start = "-"
        while end is not None:
            raw = client.xrange(keys.dead_log, min=start, max=end, count=LOG_PAGE)
            if not raw:
                break
            records = [parse_record(record_id, fields) for record_id, fields in raw]
            with conn.cursor() as cur:
                for sql, params in runs(record_statements(keys.queue_prefix, keys.partition, records)):
                    cur.executemany(sql, params)
            last = records[-1].record_id
            start = f"({last}"
        yield
    if last is not None:
        client.xtrim(keys.dead_log, minid=next_id(last), approximate=False)


def apply_pending_log(conn: Any = None, *, client: Any = None, prefix: str | None = None) -> None:
    """Apply every partition's ``jobs:dead:log`` to the archive now, under the log lock, so that a read
    of the archive right after a replay or discard shows it, whether or not a worker's archiver runs.

    Best effort: with the archive off, no table yet, nothing logged, or a server or a right missing
    (a read-only analyst), the read goes on with what the archive holds.
    """
    if conn is None and not settings().archive_on:
        return
    try:
        with (
            redis_session(client, prefix, "apply the archive's log") as (redis_client, keys),
            open_archive(conn) as archive,
        ):
            parts = partitions(redis_client, keys)
            pending = [p for p in parts if redis_client.xlen(p.dead_log)]
            pg = archive.connection() if pending else None
            if pg is None:
                return
            for part in pending:
                with under_log_lock(pg, redis_client, part):
                    pass
    except (OpslibError, psycopg.Error, redis.exceptions.RedisError):
        return


def replay_job(
    stored: Any, dead_id: str, batch: str, context: Mapping[str, str] | None = None
) -> list[tuple[bytes, bytes]]:
    """The job a replay re-adds from an archived entry's ``fields``: as ``replay.lua`` builds it
    (error fields dropped, attempts 0, ``replay_of``, ``replay_batch``, ``replays`` + 1; the replay's
    trace ``context``, when given, in place of the entry's trace fields; a patch's fields in it in place
    of the entry's own)."""
    drop = {name.encode() for name in (*DEAD_FIELDS, "attempts", "replay_of", "replay_batch", "replays")}
    if context and TRACEPARENT in context:
        drop |= {name.encode() for name in TRACE_FIELDS}
    drop |= {name.encode() for name in context or {}}  # a patch's fields replace the entry's
    fields = fields_from_json(stored)
    before = next((value for name, value in fields if name == b"replays"), b"0")
    replays = str((int(before) if before.isdigit() else 0) + 1).encode()
    job = [(name, value) for name, value in fields if name not in drop]
    return [
        *job,
        *((name.encode(), value.encode()) for name, value in (context or {}).items()),
        (b"attempts", b"0"),
        (b"replay_of", dead_id.encode()),
        (b"replay_batch", batch.encode()),
        (b"replays", replays),
    ]


def replay_from_archive(
    conn: psycopg.Connection[Any],
    client: Any,
    keys: Keys,
    dead_ids: list[str],
    batch: str,
    at: str,
    by: str = "",
    context: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Re-add the jobs of ``dead_ids`` that the archive holds as ``dead`` in ``keys``' partition (replayed by
    ``by``); dead id -> new entry id. With the replay's trace ``context``, the jobs carry it and the
    replay's span (the active one) links each entry's last attempt."""
    scripts = Scripts(client, keys)
    with under_log_lock(conn, client, keys):
        taken = conn.execute(
            TAKE_FOR_REPLAY, (at, batch, by or None, keys.queue_prefix, keys.partition, dead_ids)
        ).fetchall()
        if not taken:
            return {}
        if context:
            add_links(text(dict(fields_from_json(stored)).get(TRACE_LINK.encode(), b"")) for _id, stored in taken)
        pipe = client.pipeline(transaction=False)
        for dead_id, stored in taken:
            scripts.replay_archived(dead_id, batch, replay_job(stored, dead_id, batch, context), at=at, client=pipe)
        readded = {dead_id: text(new_id) for (dead_id, _), new_id in zip(taken, pipe.execute(), strict=True)}
        with conn.cursor() as cur:
            cur.executemany(
                SET_NEW_ID,
                [(new_id, keys.queue_prefix, keys.partition, dead_id) for dead_id, new_id in readded.items()],
            )
    return readded


def discard_from_archive(
    conn: psycopg.Connection[Any],
    client: Any,
    keys: Keys,
    dead_ids: list[str],
    batch: str,
    *,
    by: str,
    reason: str,
    at: str,
) -> set[str]:
    """Mark ``discarded`` the rows of ``dead_ids`` that the archive holds as ``dead`` in ``keys``' partition;
    the ids taken."""
    with under_log_lock(conn, client, keys):
        taken = conn.execute(
            TAKE_FOR_DISCARD, (at, by, reason, batch, keys.queue_prefix, keys.partition, dead_ids)
        ).fetchall()
    return {row[0] for row in taken}


def moving(client: Any, keys: Keys) -> set[str]:
    """Dead ids of ``keys``' partition whose replay or discard is in its log and not yet in the archive (the log
    read a page a command)."""
    moved: set[str] = set()
    for _record_id, fields in every_entry(client, keys.dead_log):
        if text(fields.get(b"event", b"")) in (EVENT_REPLAYED, EVENT_DISCARDED):
            moved.add(text(fields.get(b"dead_id", b"")))
    return moved


def still_dead(conn: psycopg.Connection[Any], client: Any, keys: Keys, dead_ids: Iterable[str]) -> set[str]:
    """Which of ``dead_ids`` the archive holds as ``dead`` in ``keys``' partition (and no pending move
    takes): what a replay or a discard would take from the archive. Reads only."""
    wanted = list(dead_ids)
    if not wanted:
        return set()
    found = {row[0] for row in conn.execute(STILL_DEAD, (keys.queue_prefix, keys.partition, wanted)).fetchall()}
    return found - moving(client, keys)


def archived_dead(
    conn: psycopg.Connection[Any],
    keys: Keys,
    kind: str,
    *,
    signature: str | None,
    error_contains: str | None,
    since: object,
) -> list[tuple[str, int]]:
    """(dead id, partition) of the entries of ``kind`` that the archive holds as ``dead``, in every
    partition of ``keys``' queue, with the filters of replay_kind."""
    query = f"SELECT dead_id, partition FROM {TABLE} WHERE queue = %s AND kind = %s"
    query += f" AND status = '{STATUS_DEAD}'"
    params: list[Any] = [keys.prefix, kind]
    start = parse_since(since)
    if start is not None:
        query += " AND dead_at >= %s"
        params.append(pd.Timestamp(start).to_pydatetime())
    if signature is not None:
        query += " AND signature = %s"
        params.append(signature)
    if error_contains is not None:
        query += " AND strpos(error, %s) > 0"
        params.append(error_contains)
    return [(row[0], int(row[1])) for row in conn.execute(query, params).fetchall()]


def dead_anywhere(conn: psycopg.Connection[Any], parts: list[Keys], dead_ids: list[str]) -> dict[str, list[int]]:
    """For each of ``dead_ids`` the archive holds as ``dead`` in one of ``parts`` (the partitions of every
    queue): the positions in ``parts`` holding it (reads only)."""
    position = {(keys.queue_prefix, keys.partition): n for n, keys in enumerate(parts)}
    found: dict[str, list[int]] = {}
    if dead_ids:
        queues = sorted({keys.queue_prefix for keys in parts})
        for dead_id, queue, partition in conn.execute(DEAD_ANYWHERE, (queues, dead_ids)).fetchall():
            if (queue, int(partition)) in position:
                found.setdefault(dead_id, []).append(position[queue, int(partition)])
    return found
