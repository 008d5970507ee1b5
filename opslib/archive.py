"""Reading the past: the dead-letter archive (PostgreSQL ``dead_letters``) as DataFrames.

``jobs:dead`` keeps about ``DEAD_MAXLEN`` recent entries and loses an entry
when it is replayed or discarded; the archive keeps every one, with what
became of it. These functions read it from ``ARCHIVE_URL`` (empty: the
``DATABASE_URL`` database, beside the application's tables), or from
``conn=`` (a psycopg connection or a URL). ``prefix=`` is the queue's
``QUEUE_PREFIX`` (the ``queue`` column), read from the environment when not
given. None of them writes.

``archive(kind=None, *, since=None, until=None, status=None, signature=None, limit=None)``
    Index ``dead_id`` (str). The columns of ``dead_letters()``: dead_at
    (datetime64[ns, UTC]), kind, job_id, outbox_id (str), attempts (int64),
    reason, error_type, error, signature, traceback, worker, request_id,
    trace, trace_id, span_id, replay_of, replay_of_batch (str: the entry's own ``replay_batch``
    field, the replay it came from), replays (int64: replays before it died), attempt_log (str: the
    attempts' errors as on the wire, see ``dead_letters()``); then partition (int64), status (str:
    dead, replayed, discarded) and the life after death: replayed_at
    (datetime64[ns, UTC]), replay_batch, replayed_by, replay_new_id (str: the batch that
    replayed it, who, and the new entry on ``jobs``), replay_outcome (str:
    succeeded, failed again, or "" while unknown), replay_dead_id (str: the
    new dead entry when it failed again), discarded_at (datetime64[ns, UTC]),
    discarded_by, discard_reason (str), archived_at (datetime64[ns, UTC]);
    then the payload's own fields, sorted by name (str, NaN where an entry
    lacks one). Absent text is ``""``, absent times NaT. Oldest first.

``history(*, freq="1h", kind=None, since=None, until=None)``
    One row per period and kind: period (datetime64[ns, UTC], the period's
    start; periods are aligned on UTC midnight), kind (str), died, replayed,
    discarded, succeeded_after_replay (int64). Each event is counted in the
    period of its own time: a death at ``dead_at``, a replay at
    ``replayed_at``, a discard at ``discarded_at``, and a replayed job that
    succeeded at its ``replayed_at``. ``since`` and ``until`` are widened to
    whole periods. Each kind with an event in the window (or the one asked
    for) gets a row for every period, 0 when quiet, from the
    period of ``since`` (else the first event's) to the period before
    ``until`` (else now's; the last event's when neither is given).

Example::

    >>> opslib.archive("render_tickets", since="2026-11-30 20:00", status="replayed")[["kind", "replay_outcome"]]
                               kind replay_outcome
    dead_id
    1796013080335-0  render_tickets      succeeded
    >>> opslib.history(freq="1h", since=pd.Timedelta("1D"))
                         period            kind  died  replayed  discarded  succeeded_after_replay
    0 2026-11-30 20:00:00+00:00  render_tickets    40         0          0                       0
    1 2026-11-30 21:00:00+00:00  render_tickets     0        40          0                      40
"""

from __future__ import annotations

import functools
from typing import Any

import pandas as pd

from opslib.archive_frames import (
    ARCHIVE_SELECT,
    HISTORY_MEASURES,
    PERIOD_ORIGIN,
    archive_to_frame,
    busy_periods,
    history_to_frame,
    parse_freq,
    period_of,
)
from opslib.archive_query import read_archive
from opslib.checks import check_kind, check_limit
from opslib.connection import queue_keys
from opslib.errors import OpslibError
from opslib.export import ArchiveSources, merged, with_exported
from opslib.gc_pause import collector_paused
from opslib.kinds import archived_or_declared
from opslib.moves.archived import apply_pending_log
from opslib.search import ARCHIVE_SEARCH, check_search
from opslib.session import with_servers
from opslib.signatures import check_signature
from opslib.times import check_window
from worker.archive.table import OUTCOME_SUCCEEDED, STATUS_DEAD, STATUS_DISCARDED, STATUS_REPLAYED, TABLE

STATUSES = (STATUS_DEAD, STATUS_REPLAYED, STATUS_DISCARDED)
ARCHIVE_HOLDER = "the archive holds or the live workers declare"
"""Where an unknown kind was looked for, for its message."""


def check_status(status: object) -> str | None:
    if status is None or (isinstance(status, str) and status in STATUSES):
        return status
    raise OpslibError(f"status must be one of {', '.join(map(repr, STATUSES))} or None (every row), got {status!r}")


def where_clause(
    queue: str, kind: str | None, *, died_from: pd.Timestamp | None = None, died_before: pd.Timestamp | None = None
) -> tuple[str, dict[str, Any]]:
    """The conditions on the queue, the kind and ``dead_at``, and their parameters (of the same names)."""
    conditions, params = ["queue = %(queue)s"], {"queue": queue, "kind": kind, "died_from": None, "died_before": None}
    if kind is not None:
        conditions.append("kind = %(kind)s")
    if died_from is not None:
        conditions.append("dead_at >= %(died_from)s")
        params["died_from"] = died_from.to_pydatetime()
    if died_before is not None:
        conditions.append("dead_at < %(died_before)s")
        params["died_before"] = died_before.to_pydatetime()
    return " AND ".join(conditions), params


@with_servers
@with_exported
def archive(
    kind: str | None = None,
    *,
    since: object = None,
    until: object = None,
    status: str | None = None,
    signature: str | None = None,
    search: str | None = None,
    limit: int | None = None,
    servers: ArchiveSources,
) -> pd.DataFrame:
    """Every archived dead letter, oldest first, with what became of it (columns in the module docstring).

    ``kind`` keeps one kind; ``since`` / ``until`` keep entries that died in
    ``[since, until)`` (a time, read in the display zone unless it names one,
    or a duration back from now); ``status`` keeps ``"dead"``, ``"replayed"`` or
    ``"discarded"`` rows; ``signature`` keeps one failure group (a value of
    ``failure_groups().signature``); ``search`` keeps rows whose id, error,
    traceback, ids or payload contain the text (any case); ``limit`` keeps
    the most recent ``limit`` of what is left. The moves not yet in the rows
    (``jobs:dead:log``) are applied first, so a replay or discard just made shows at once
    (``client=``: the Redis to read it from; ``conn=``, ``prefix=``: :mod:`opslib.session`);
    ``include_exported``: a folder of ``python -m opslib export``, read too (:mod:`opslib.export`).

    >>> opslib.archive("send_email", since=pd.Timedelta("7D"), status="dead").groupby("signature").size()
    """
    start, end = check_window(since, until)
    wanted = check_status(status)
    last = check_limit(limit)
    needle = check_search(search)
    if signature is not None:
        check_signature(signature)
    if kind is not None:
        check_kind(kind, [kind])  # a non-empty string; the name is checked when nothing matches it
    apply_pending_log(servers.conn, client=servers.client, prefix=servers.prefix)  # read your own writes
    queue = queue_keys(servers.prefix).prefix
    where, params = where_clause(queue, kind, died_from=start, died_before=end)
    if wanted is not None:
        where += " AND status = %(status)s"
        params["status"] = wanted
    if signature is not None:
        where += " AND signature = %(signature)s"
        params["signature"] = signature
    if needle is not None:
        where += f" AND {ARCHIVE_SEARCH}"
        params["search"] = needle
    # Newest first so that LIMIT keeps the most recent; within one millisecond, a shorter id has the
    # smaller sequence number. Turned oldest first below.
    query = (
        f"SELECT {', '.join(ARCHIVE_SELECT)} FROM {TABLE} WHERE {where} "
        f"ORDER BY dead_at DESC, length(dead_id) DESC, dead_id DESC{' LIMIT %(limit)s' if last else ''}"
    )
    with collector_paused():  # a day is some 17,000 rows of a dozen columns (opslib.gc_pause says why)
        rows = read_archive(servers.conn, query, {**params, "limit": last})
        if servers.exported is not None:
            return archive_to_frame(merged(rows, servers.exported, queue, {**params, "kind": kind}, last))
        if kind is not None and not rows:
            known = functools.partial(archived_or_declared, servers.conn, queue, servers.client, servers.prefix)
            check_kind(kind, [], known, holder=ARCHIVE_HOLDER)
        return archive_to_frame(reversed(rows))


#: One scan of the table: rows grouped by kind and by the periods of their three times (a few thousand
#: groups for a million rows), then each group's events moved to their own period and summed.
HISTORY_QUERY = """
WITH events AS (
    SELECT date_bin(%(stride)s, dead_at, %(origin)s) AS period, kind,
           count(*) AS died, 0 AS replayed, 0 AS discarded, 0 AS succeeded
    FROM {table} WHERE {where} AND {died} GROUP BY 1, 2
    UNION ALL
    SELECT date_bin(%(stride)s, replayed_at, %(origin)s), kind, 0, count(*), 0,
           count(*) FILTER (WHERE replay_outcome IS NOT DISTINCT FROM %(succeeded)s)
    FROM {table} WHERE {where} AND replayed_at IS NOT NULL AND {replayed} GROUP BY 1, 2
    UNION ALL
    SELECT date_bin(%(stride)s, discarded_at, %(origin)s), kind, 0, 0, count(*), 0
    FROM {table} WHERE {where} AND discarded_at IS NOT NULL AND {discarded} GROUP BY 1, 2
)
SELECT period, kind, sum(died)::bigint, sum(replayed)::bigint, sum(discarded)::bigint, sum(succeeded)::bigint
FROM events
GROUP BY period, kind
ORDER BY period, kind
"""


#: The events :func:`history` counts, by the column that holds each one's time.
HISTORY_EVENTS = {"died": "dead_at", "replayed": "replayed_at", "discarded": "discarded_at"}


def _in_window(column: str, first: pd.Timestamp | None, after: pd.Timestamp | None) -> str:
    """The condition that ``column`` falls in the window ``[first, after)`` (either end may be open)."""
    bounds = [f"{column} >= %(first)s" if first is not None else "", f"{column} < %(died_before)s" if after else ""]
    return " AND ".join(bound for bound in bounds if bound) or "TRUE"


def history(
    *,
    freq: object = "1h",
    kind: str | None = None,
    since: object = None,
    until: object = None,
    busy: bool = False,
    conn: Any = None,
    prefix: str | None = None,
    client: Any = None,
) -> pd.DataFrame:
    """How many dead letters died, were replayed, were discarded and succeeded after a replay, per period and kind.

    ``freq`` is the period's length (``"15min"``, ``"1h"``, ``"1D"``, a
    ``pd.Timedelta``...; periods are aligned on UTC midnight). ``since`` /
    ``until`` (times or durations back from now, as for :func:`archive`)
    choose the periods: from the one holding ``since`` to the one holding
    the last instant before ``until`` (else now), each counted whole.
    ``busy=True`` keeps only the periods where something happened. Columns
    in the module docstring; ``attrs["freq"]`` holds the period length.
    Draw it with :func:`opslib.plot_history`.

    >>> opslib.history(freq="1D", since=pd.Timedelta("7D")).groupby("kind")[["died", "replayed"]].sum()
    """
    stride = parse_freq(freq)
    start, end = check_window(since, until)
    if kind is not None:
        check_kind(kind, [kind])  # a non-empty string; the name is checked when nothing matches it
    apply_pending_log(conn, client=client, prefix=prefix)
    queue = queue_keys(prefix).prefix
    first = period_of(start, stride) if start is not None else None
    if end is None and start is not None:
        end = pd.Timestamp.now(tz="UTC")
    after = period_of(end - pd.Timedelta(microseconds=1), stride) + stride if end is not None else None
    # Each event is counted from the rows whose event falls in the window, by its own column: a death by
    # ``dead_at`` (the partitions of the window only), a replay or a discard by its time (an index each), so
    # the read stays the window's whatever the archive's age; rows died before the window's end only.
    where, params = where_clause(queue, kind, died_before=after)
    if first is not None:
        params["first"] = first.to_pydatetime()
    windows = {event: _in_window(column, first, after) for event, column in HISTORY_EVENTS.items()}
    query = HISTORY_QUERY.format(table=TABLE, where=where, **windows)
    params |= {"stride": stride.to_pytimedelta(), "origin": PERIOD_ORIGIN.to_pydatetime()}
    params["succeeded"] = OUTCOME_SUCCEEDED
    rows = read_archive(conn, query, params)
    if kind is not None and not any(row[1] == kind for row in rows):
        known = functools.partial(archived_or_declared, conn, queue, client, prefix)
        check_kind(kind, [], known, holder=ARCHIVE_HOLDER)
    frame = history_to_frame(rows, stride, start=first, end=after, kinds=[kind] if kind is not None else [])
    return busy_periods(frame, HISTORY_MEASURES) if busy else frame
