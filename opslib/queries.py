"""The read-only queries: dead letters, pending entries, delayed jobs, stats, failure groups, SQL.

Every function returns a pandas DataFrame whose columns and dtypes are fixed,
even when it is empty (timestamps ``datetime64[ns, UTC]``, durations
``timedelta64[ns]``, counts ``int64``, ids and text ``str``), or, for
:func:`queue_stats`, a small object holding two such frames. Each takes
``client=`` (a ``redis.Redis``) and ``prefix=`` (the ``QUEUE_PREFIX``), read
from the environment when not given. None of them writes: a Redis user
allowed only read commands can run them all.

``dead_letters(kind=None, *, since=None, signature=None, limit=None)``
    Index ``dead_id`` (str). Columns: dead_at (datetime64[ns, UTC], from the
    entry id), kind, job_id (the job's ``job_id``, else its ``outbox_id``: the
    id ``pending()`` and ``delayed()`` show), outbox_id (str), attempts
    (int64: attempts made), reason (exhausted / permanent / poison /
    malformed / unknown_kind), error_type (the exception name), error, signature (the
    error with values replaced, see :mod:`opslib.signatures`), traceback,
    worker, request_id, trace, trace_id, span_id (str: the W3C trace and
    span that created the job, from its ``traceparent``), replay_of, replay_batch (str, ``""`` when
    absent), replays (int64: how many times the job was replayed before it
    died this time; > 0 means it failed again after a replay), attempt_log
    (str: the errors of its attempts since it was enqueued or replayed, compact
    JSON ``[{"at", "duration_s", "worker", "error"}, ...]``, oldest first, the
    last 10, each error cut to 500 characters; ``""`` when it never ran;
    ``worker.store.attempt_log.parse`` reads it, ``show()`` prints it), partition
    (int64: the queue partition, 0 with one), then the
    payload's own fields, sorted by name (str, NaN where an entry lacks one).
    Oldest first.

``pending(kind=None)``
    Index ``id`` (str, the entry on ``jobs``). Columns: kind, job_id,
    consumer (str), idle (timedelta64[ns]), deliveries (int64), partition (int64).

``pending_counts(*, reclaim_idle_ms=None)``
    One row per (consumer, kind): consumer, kind (str), pending (int64),
    beyond_reclaim (int64: idle at least ``RECLAIM_IDLE_MS``, the entries the
    reclaim loop will take or bury), oldest_idle (timedelta64[ns]).

``delayed(kind=None)``
    run_at (datetime64[ns, UTC]), kind, job_id (str), attempts (int64:
    failed attempts so far), due (bool: run_at has passed), fields (object:
    the job's field dict), partition (int64). Soonest first.

``queue_stats(*, reclaim_idle_ms=None)``
    A :class:`QueueStats`: ``.counts`` (index ``metric``, column ``value``
    int64: stream_length, lag, oldest_waiting_s (whole seconds the oldest
    undelivered entry has waited, 0 when none waits), pending, pending_idle,
    delayed, delayed_due, dead, dead_evicted, consumers, consumers_live: the numbers of the
    worker's ``<METRICS_NAMESPACE>_queue_*`` metrics; summed over the partitions, the
    oldest wait the longest of them) and ``.consumers`` (consumer (str),
    pending (int64), idle (timedelta64[ns]), heartbeat (bool)).

Every function reads all the queue's partitions (``QUEUE_PARTITIONS``, as
recorded on the queue by its workers) into one frame.

``failure_groups(dead=None)``
    One row per error signature, the largest first: signature, error_type,
    kinds (str), count (int64), first_seen, last_seen (datetime64[ns, UTC]),
    example_id, example_error (str).

``sql(query, params=None, *, conn=None)``
    The rows of a PostgreSQL query, columns as the query names them;
    timestamps with a time zone become datetime64[ns, UTC].

Example::

    >>> dead = dead_letters("render_tickets")
    >>> failure_groups(dead)[["signature", "count"]]
                                              signature  count
    0  SeatLabelInvalid: <str> is not a row letter ...     40
"""

from __future__ import annotations

import html
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import psycopg
import redis

from opslib.bounded import Scan, zset_members
from opslib.checks import check_kind, check_limit
from opslib.columns import COUNT, MARK, TEXT, TIME, typed_frame
from opslib.connection import archive_hint, database_url, partitions, pg_session, redis_session, settings
from opslib.errors import OpslibError
from opslib.frames import (
    combine,
    consumers_to_frame,
    dead_to_frame,
    delayed_to_frame,
    pending_counts_to_frame,
    select_dead,
)
from opslib.kinds import KNOWN_WHERE, held_back, known_kinds
from opslib.pending_reads import read_pending
from opslib.search import check_search, search_mask
from opslib.signatures import check_signature, failure_groups_to_frame
from opslib.times import check_window
from worker.observability.queue_state import read_partitions_state, stat_fields
from worker.printable import printable
from worker.store.connection import on_owner
from worker.store.keys import GROUP, Keys


def read_dead(client: Any, keys: Keys, since: pd.Timestamp | None = None) -> list[Any]:
    """The entries of ``jobs:dead`` from ``since`` on, oldest first, as ``[id, [field, value, ...]]``.

    The reply is read from a connection of the client's pool (on a cluster,
    of the primary that owns the stream) without redis-py's parsing into a
    dict per entry, which costs a third of the time of ``dead_letters()`` on
    a full dead stream.
    """

    def xrange(owner: Any) -> Any:
        pool = owner.connection_pool
        connection = pool.get_connection()
        try:
            connection.send_command("XRANGE", keys.dead, entry_floor(since), "+")
            return connection.read_response()
        except BaseException:
            connection.disconnect()
            raise
        finally:
            pool.release(connection)

    return list(on_owner(client, keys.dead, xrange) or [])


def entry_floor(since: pd.Timestamp | None) -> str:
    """The lowest stream id created at or after ``since`` (``-``: from the start)."""
    return "-" if since is None else f"{int(since.timestamp() * 1000)}-0"


def dead_letters(
    kind: str | None = None,
    *,
    since: object = None,
    until: object = None,
    signature: str | None = None,
    search: str | None = None,
    limit: int | None = None,
    client: redis.Redis | None = None,
    prefix: str | None = None,
) -> pd.DataFrame:
    """The dead letters, oldest first: one row per entry of ``jobs:dead`` (columns in the module docstring).

    ``kind`` keeps one kind; ``since`` / ``until`` keep entries dead in
    ``[since, until)`` (times read in the display zone unless they name one,
    or durations back from now); ``signature`` keeps one failure group (a
    value of ``failure_groups().signature``); ``search`` keeps entries whose
    id, error, traceback, ids or payload contain the text (any case: an
    order id, an email, an exception's name); ``limit`` keeps the most recent
    ``limit`` of what is left.

    >>> opslib.dead_letters(search="4471", since="2h")
    """
    start, end = check_window(since, until)
    last = check_limit(limit)
    needle = check_search(search)
    if signature is not None:
        check_signature(signature)
    with redis_session(client, prefix, "read the dead letters") as (redis_client, keys):
        parts = partitions(redis_client, keys)
        if kind is None and signature is None and needle is None and end is None and last is not None:
            frames = [
                dead_to_frame(
                    reversed(redis_client.xrevrange(p.dead, max="+", min=entry_floor(start), count=last)),
                    p.partition,
                    p.queue,
                )
                for p in parts
            ]
            return combine(frames, "dead_at").tail(last)
        frame = combine(
            [dead_to_frame(read_dead(redis_client, p, start), p.partition, p.queue) for p in parts], "dead_at"
        )
        if kind is not None:
            check_kind(kind, frame["kind"].unique(), lambda: known_kinds(redis_client, keys, parts), holder=KNOWN_WHERE)
    mask = search_mask(frame, needle)
    if kind is not None:
        mask &= frame["kind"] == kind
    if signature is not None:
        mask &= frame["signature"] == signature
    if end is not None:
        mask &= frame["dead_at"] < end
    if not mask.all():
        frame = select_dead(frame, mask)
    return frame.tail(last) if last is not None else frame


def pending(kind: str | None = None, *, client: redis.Redis | None = None, prefix: str | None = None) -> pd.DataFrame:
    """The entries delivered to a worker and not acknowledged yet, one row each (columns in the module docstring).

    An entry stays pending while its job runs; one idle beyond
    ``RECLAIM_IDLE_MS`` belonged to a process that died, and the reclaim loop
    will run it again (or bury it as poison after ``MAX_DELIVERIES``).
    """
    with redis_session(client, prefix, "read the pending entries") as (redis_client, keys):
        parts = partitions(redis_client, keys)
        frame = read_pending(redis_client, parts)
        if kind is not None:
            check_kind(kind, frame["kind"].unique(), lambda: known_kinds(redis_client, keys, parts), holder=KNOWN_WHERE)
    if kind is not None:
        frame = frame[frame["kind"] == kind]
    return frame


def pending_counts(
    *, reclaim_idle_ms: int | None = None, client: redis.Redis | None = None, prefix: str | None = None
) -> pd.DataFrame:
    """Pending entries counted by consumer and kind; ``beyond_reclaim`` counts those idle past the threshold.

    ``reclaim_idle_ms`` defaults to the worker's ``RECLAIM_IDLE_MS``.
    """
    threshold = settings().reclaim_idle_ms if reclaim_idle_ms is None else reclaim_idle_ms
    with redis_session(client, prefix, "read the pending entries") as (redis_client, keys):
        frame = read_pending(redis_client, partitions(redis_client, keys))
    return pending_counts_to_frame(frame, pd.Timedelta(milliseconds=threshold))


def delayed(kind: str | None = None, *, client: redis.Redis | None = None, prefix: str | None = None) -> pd.DataFrame:
    """The jobs waiting in ``delayed`` (retries and jobs enqueued for later), soonest first: the
    :data:`~opslib.bounded.CAP` soonest of each partition, read in pages (``attrs["notes"]`` says when
    there were more)."""
    notes: list[str] = []
    with redis_session(client, prefix, "read the delayed jobs") as (redis_client, keys):
        parts = partitions(redis_client, keys)
        now = time.time()
        frames = []
        for p in parts:
            scan = Scan(f"delayed ({p.delayed})")
            frames.append(
                delayed_to_frame(
                    list(zset_members(redis_client, p.delayed, scan, withscores=True)), now, p.partition, p.queue
                )
            )
            if scan.capped:
                notes.append(scan.note(redis_client.zcard(p.delayed)))
        frame = combine(frames, "run_at")
        if kind is not None:
            check_kind(kind, frame["kind"].unique(), lambda: known_kinds(redis_client, keys, parts), holder=KNOWN_WHERE)
    if kind is not None:
        frame = frame[frame["kind"] == kind]
    frame.attrs["notes"] = notes
    return frame


#: The rows of ``queue_stats()``: the fields of ``worker.observability.queue_state.QueueState``, in order.
STAT_NAMES = tuple(stat.name for stat in stat_fields())


@dataclass(frozen=True)
class QueueStats:
    """The queue's numbers (``counts``, one int per metric) and its consumers, shown as two tables.

    ``lag`` is the number of entries no worker has read yet, ``oldest_waiting_s``
    how many seconds the oldest of them has waited; ``pending_idle``
    the pending entries idle beyond ``RECLAIM_IDLE_MS`` (their worker died).
    ``dead_evicted`` counts dead letters the ``DEAD_MAXLEN`` cap removed.
    ``consumers`` counts the group's consumer list, ``consumers_live`` the
    workers whose heartbeat is fresh (see :mod:`worker.observability.queue_state`). Each metric is also
    an attribute (``queue_stats().dead``), except ``consumers``: that
    attribute is the consumers' table. ``paused_kinds``, ``oldest_pause_s``
    (whole seconds), ``parked`` and ``throttled`` are the incident desk's
    numbers; ``paused`` is the table of the pauses: kind (index), since, by, reason. ``counts`` adds up
    every named queue; ``by_queue`` has a row per queue in use (index ``queue``: ``default`` first) with
    its :data:`BY_QUEUE` numbers, shown beside the others once there are several queues.
    """

    counts: pd.DataFrame
    consumers: pd.DataFrame
    paused: pd.DataFrame = field(default_factory=lambda: pauses_to_frame({}))
    by_queue: pd.DataFrame = field(default_factory=lambda: by_queue_to_frame({}))

    def __getattr__(self, name: str) -> int:
        if name in STAT_NAMES:
            return int(self.counts.loc[name, "value"])
        raise AttributeError(name)

    def __repr__(self) -> str:
        paused = f"\n\npaused:\n{self.paused!r}" if len(self.paused) else ""
        queues = f"\n\nby queue:\n{self.by_queue!r}" if len(self.by_queue) > 1 else ""
        return f"{self.counts!r}{queues}\n\nconsumers:\n{self.consumers!r}{paused}"

    def _repr_html_(self) -> str:
        paused = "<p><b>paused kinds</b></p>" + self.paused.to_html(escape=True) if len(self.paused) else ""
        page = (
            self.counts.to_html(escape=True)
            + f"<p><b>consumers of group {html.escape(GROUP)}</b></p>"
            + self.consumers.to_html(index=False, escape=True)
            + paused
        )
        return printable(page, lines=True)  # a kind's or consumer's bidi and control characters, inert


PAUSE_COLUMNS = {"since": TIME, "by": TEXT, "reason": TEXT}
#: ``queue_stats().by_queue``'s columns: the numbers of :data:`STAT_NAMES` that belong to one queue.
BY_QUEUE = ("stream_length", "lag", "pending", "pending_idle", "delayed", "delayed_due", "dead", "parked", "throttled")


def of_queue(parts: list[Keys], queue: str) -> list[Keys]:
    """The partitions of ``queue`` among ``parts``."""
    return [keys for keys in parts if keys.queue == queue]


def by_queue_to_frame(states: Mapping[str, Any]) -> pd.DataFrame:
    """One row per queue (index ``queue``, in ``states``' order) of each state's :data:`BY_QUEUE` numbers."""
    names = list(states)
    columns = {name: [int(getattr(states[queue], name)) for queue in names] for name in BY_QUEUE}
    return typed_frame(columns, dict.fromkeys(BY_QUEUE, COUNT), index=pd.Index(names, dtype=TEXT, name="queue"))


def pauses_to_frame(paused: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """The pauses (kind -> since, by, reason as recorded by ``opslib.pause``), one row per kind, sorted."""
    kinds = sorted(paused)
    columns = {
        "since": [pd.to_datetime(paused[k].get("since"), errors="coerce", utc=True) for k in kinds],
        "by": [str(paused[k].get("by", "")) for k in kinds],
        "reason": [str(paused[k].get("reason", "")) for k in kinds],
    }
    return typed_frame(columns, PAUSE_COLUMNS, index=pd.Index(kinds, dtype=TEXT, name="kind"))


def queue_stats(
    *, reclaim_idle_ms: int | None = None, client: redis.Redis | None = None, prefix: str | None = None
) -> QueueStats:
    """Stream length, lag, pending (and idle beyond reclaim), delayed (and due), dead (and evicted by the
    cap), consumers (and live ones): the numbers the worker's metrics export, read by the same function.

    ``reclaim_idle_ms`` (for ``pending_idle``) defaults to the worker's ``RECLAIM_IDLE_MS``.
    """
    threshold = settings().reclaim_idle_ms if reclaim_idle_ms is None else reclaim_idle_ms
    with redis_session(client, prefix, "read the queue's numbers") as (redis_client, keys):
        parts = partitions(redis_client, keys)
        state = read_partitions_state(redis_client, parts, reclaim_idle_ms=threshold)
        paused, _throttles = held_back(redis_client, parts[0])
        states = {queue: state for queue in {p.queue for p in parts}}  # one queue: the same numbers
        if len(states) > 1:
            states = {
                queue: read_partitions_state(redis_client, of_queue(parts, queue), reclaim_idle_ms=threshold)
                for queue in dict.fromkeys(p.queue for p in parts)
            }
    shown = {
        "consumers": len(state.consumers),
        "oldest_waiting_s": round(state.oldest_waiting_s),
        "oldest_pause_s": round(state.oldest_pause_s),
    }
    values = [shown.get(name, getattr(state, name)) for name in STAT_NAMES]
    counts = typed_frame(
        {"value": values},
        {"value": COUNT},
        index=pd.Index(STAT_NAMES, dtype=TEXT, name="metric"),
    )
    return QueueStats(counts, consumers_to_frame(state.consumers), pauses_to_frame(paused), by_queue_to_frame(states))


def failure_groups(
    dead: pd.DataFrame | None = None, *, client: redis.Redis | None = None, prefix: str | None = None
) -> pd.DataFrame:
    """Dead letters grouped by error signature, the largest group first (columns in the module docstring).

    ``dead`` is a ``dead_letters()`` frame, filtered as you like; with none,
    every dead letter is read.
    """
    if dead is None:
        dead = dead_letters(client=client, prefix=prefix)
    missing = {"signature", "error_type", "kind", "dead_at", "error"} - set(dead.columns)
    if missing:
        raise OpslibError(
            f"failure_groups needs a dead_letters() frame; this one lacks the columns {', '.join(sorted(missing))}"
        )
    return failure_groups_to_frame(dead)


def sql(query: str, params: Sequence[Any] | Mapping[str, Any] | None = None, *, conn: Any = None) -> pd.DataFrame:
    """The rows of a PostgreSQL query as a frame (columns as the query names them).

    ``conn`` is a psycopg connection, a URL, or None for ``DATABASE_URL`` /
    the ``make run`` stack. Pass values through ``params`` (``%s`` or
    ``%(name)s`` placeholders), never by formatting them into ``query``.
    On a connection of its own (no ``conn``, or a URL) the statement runs
    read-only: a data fix (``UPDATE ... RETURNING ...``) goes inside
    :func:`opslib.transaction`, where it can be looked at before it counts (and
    an analyst's PostgreSQL role has SELECT only anyway); on a connection you
    pass, the transaction is yours.
    """
    own = not isinstance(conn, psycopg.Connection)
    try:
        with pg_session(conn, database_url, "DATABASE_URL") as connection, connection.cursor() as cursor:
            if own:
                cursor.execute("SET default_transaction_read_only = on")
            cursor.execute(query, params)
            names = [column.name for column in cursor.description or []]
            rows = cursor.fetchall() if cursor.description else []
            rowcount = cursor.rowcount
    except psycopg.errors.ReadOnlySqlTransaction as exc:
        raise OpslibError(
            f"the query failed: {str(exc).strip()}; opslib.sql reads only: make a change inside "
            "`with opslib.transaction() as tx: tx.sql(...)`, where it can be looked at before it commits"
        ) from None
    except psycopg.Error as exc:
        raise OpslibError(f"the query failed: {str(exc).strip()}{archive_hint(exc)}") from None
    frame = pd.DataFrame.from_records(rows, columns=names)
    for name in frame.columns:
        if isinstance(frame[name].dtype, pd.DatetimeTZDtype):
            frame[name] = frame[name].dt.tz_convert("UTC").astype("datetime64[ns, UTC]")
    frame.attrs[MARK] = True
    frame.attrs["rowcount"] = rowcount  # rows the statement returned or changed (-1: PostgreSQL did not say)
    return frame
