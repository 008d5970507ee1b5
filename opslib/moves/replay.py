"""Replay dead letters after a fix, and follow what became of them.

A replay moves each entry with the replay script (``worker/store/lua/replay.lua``,
one atomic XRANGE + XADD ``jobs`` + XDEL ``jobs:dead`` + HSET
``replay:<batch>`` + XADD ``jobs:dead:log``): the job goes back with its
original fields, attempts 0, the error fields (``worker.store.wire.DEAD_FIELDS``)
dropped, ``replay_of`` = the dead id and ``replay_batch`` = the batch id; the
log record marks the archive's row ``replayed`` with the batch and the new
id. An id that ``jobs:dead`` no longer holds (trimmed once archived) but the
archive holds as ``dead`` is re-added from its archived fields
(:mod:`opslib.moves.archived`). Inside an active OpenTelemetry span, the
replay runs under a ``replay <queue>`` span linked to each entry's last
attempt (its ``trace_link``) and writes that span's context into the jobs
(``traceparent``, ``tracestate``), so each replayed job's first attempt links
to it (docs/operations.md, "Tracing"); entries re-added from the archive
too (their links are added once the archive has given them up). Two people replaying (or one replaying, one
discarding) the same entries at once move each once; an entry no longer
there is reported as ``missing``, not an error. The calls are pipelined, 500
at a time.

``replay(ids, *, dry_run=False, patch=None, conn=None)``, and
``replay_kind(kind, *, signature=None, error_contains=None, since=None, dry_run=False, patch=None, conn=None)``
    One row per dead id: dead_id, new_id (str, ``""`` unless replayed),
    status (str: replayed / missing / would replay), batch (str, the same on
    every row, ``""`` in a dry run, which writes nothing), partition (int64:
    the queue partition holding the entry, -1 when found in none). Index
    0..n-1; the batch is also in ``frame.attrs["batch"]``. With ``patch`` (fields set on every
    replayed job, :mod:`opslib.moves.patch`), a dry run has one more column, changes (str: what
    each entry would become). ``replay_kind`` takes the
    matching entries of ``jobs:dead`` and of the archive. ``conn``: the
    archive's PostgreSQL (a psycopg connection or URL; None: ``ARCHIVE_URL``,
    else ``DATABASE_URL`` or the ``make run`` stack); it is only contacted
    for ids ``jobs:dead`` does not hold, and for ``replay_kind``.

``replay_status(batch, *, wait_s=None)``
    One row per replayed dead id: dead_id, status (succeeded / failed again /
    retrying / still queued), where (jobs:dead / delayed / jobs / running /
    ``""``), attempts (int64: failed attempts since the replay), error (str:
    the latest), new_dead_id (str: the entry it became in ``jobs:dead``),
    updated_at (datetime64[ns, UTC], NaT until the worker recorded an
    outcome), batch (str), partition (int64). The worker keeps outcomes for 24 hours; the
    archive keeps the final one for good (``replay_outcome``), and once Redis has forgotten
    the batch, ``replay_status`` answers from there.

Example::

    >>> plan = replay_kind("render_tickets", signature=sig, dry_run=True)   # writes nothing
    >>> done = replay_kind("render_tickets", signature=sig)
    >>> replay_status(done.attrs["batch"], wait_s=60).status.value_counts()
    succeeded    40
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Unpack

import pandas as pd
import redis

from opslib.checks import check_batch
from opslib.connection import partitions, redis_session
from opslib.errors import OpslibError
from opslib.frames import (
    archived_status_to_frame,
    combine,
    entry_order,
    parse_outcome,
    replay_status_to_frame,
    replay_to_frame,
)
from opslib.moves.archived import apply_pending_log, open_archive, replay_from_archive
from opslib.moves.batches import BATCH_TIME
from opslib.moves.dead_moves import Batch, DeadMove, move_dead
from opslib.moves.locate import Located, Progress
from opslib.moves.patch import checked_patch, with_changes
from opslib.moves.selection import Filters, Selection
from opslib.operator import Operator
from opslib.queries import entry_floor
from opslib.session import Servers, Session, with_servers
from opslib.times import parse_since
from worker.archive.table import TABLE
from worker.store.keys import GROUP, Keys
from worker.store.scripts import Scripts
from worker.store.vocabulary import FINAL_STATUSES, RECORDED_QUEUED, WHERE_JOBS, WHERE_RUNNING
from worker.store.wire import DEAD_FIELDS, decode_member, text

NEEDS_WRITE = (
    "replay needs a user that may run scripts and write the queue's keys (EVALSHA of the replay script: "
    "XRANGE, XADD, XDEL, HSET, EXPIRE); a read-only user can run replay(..., dry_run=True) and every query"
)


@dataclass(frozen=True)
class Replay(DeadMove):
    """Back onto ``jobs``, attempts 0, the error fields dropped (``replay.lua``; ``replay_archived.lua``
    for an entry only the archive holds), traced."""

    verb = "replay"
    needs = NEEDS_WRITE
    traced = True

    patch: Mapping[str, str] = field(default_factory=dict)
    """Fields set on every replayed job (:mod:`opslib.moves.patch`), each replacing the entry's own."""

    def detail(self) -> dict[str, Any]:
        return {"patch": dict(self.patch)} if self.patch else {}

    def take(self, scripts: Scripts, dead_id: str, batch: Batch, pipe: Any) -> Any:
        return scripts.replay(
            dead_id,
            batch.id,
            DEAD_FIELDS,
            at=batch.at,
            record=batch.record,
            by=self.operator.by,
            client=pipe,
            context={**batch.context, **self.patch},
        )

    def take_archived(
        self, pg: Any, session: Session, keys: Keys, dead_ids: list[str], batch: Batch
    ) -> Mapping[str, Any]:
        return replay_from_archive(
            pg,
            session.client,
            keys,
            dead_ids,
            batch.id,
            batch.at,
            by=self.operator.by,
            context={**batch.context, **self.patch},
        )

    def to_frame(self, found: Located, results: Sequence[Any], batch: str) -> pd.DataFrame:
        return replay_to_frame(found.dead_ids, results, batch, dry_run=not batch, partitions=found.where)


@with_servers
def replay(
    ids: object,
    *,
    reason: str | None = None,
    by: str | None = None,
    dry_run: bool = False,
    on_progress: Progress | None = None,
    patch: Mapping[str, object] | None = None,
    servers: Servers,
) -> pd.DataFrame:
    """Put dead letters back on ``jobs`` (columns in the module docstring); ``dry_run`` writes nothing.

    ``ids`` is one dead id, a list of them, or a ``dead_letters()`` frame
    (its index; its ``partition`` column says where each entry is). A bare id
    is looked for in every partition; one found in two partitions is refused
    (pass the ``dead_letters()`` rows instead). ``on_progress(done, total)``
    is called after each chunk. ``reason`` (optional) and ``by`` (default: the
    operating-system user) go into the action's record (:func:`opslib.actions`). ``patch``: fields
    set on every replayed job (:mod:`opslib.moves.patch`; a dry run shows each entry's ``changes``).
    """
    move = Replay(Operator.acting("replay", by=by, reason=reason, required=False), checked_patch(patch))
    return _shown(move, move_dead(move, ids, servers, dry_run=dry_run, on_progress=on_progress), servers)


def _shown(move: Replay, frame: pd.DataFrame, servers: Servers) -> pd.DataFrame:
    """A patched replay's frame with each entry's ``changes`` in a dry run (the entries are there still)."""
    return with_changes(frame, move.patch, servers) if move.patch and not frame["batch"].any() else frame


@with_servers
def replay_kind(
    kind: str,
    *,
    reason: str | None = None,
    by: str | None = None,
    dry_run: bool = False,
    patch: Mapping[str, object] | None = None,
    servers: Servers,
    **filters: Unpack[Filters],
) -> pd.DataFrame:
    """Replay every dead letter of ``kind`` that matches the filters (columns in the module docstring).

    ``signature`` keeps one failure group (``failure_groups().signature``),
    ``error_contains`` keeps errors containing that text (case-sensitive),
    ``since`` keeps entries dead at or after a time. The entries come from
    ``jobs:dead`` and from the archive (those the stream was trimmed of). Run
    it with ``dry_run=True`` first: it returns the same rows with status
    ``would replay`` and writes nothing. ``patch``: as :func:`replay`'s.
    """
    move = Replay(Operator.acting("replay", by=by, reason=reason, required=False), checked_patch(patch))
    selection = Selection(kind, **filters)
    return _shown(move, move_dead(move, selection, servers, dry_run=dry_run), servers)


def replay_status(
    batch: str,
    *,
    wait_s: float | None = None,
    client: redis.Redis | None = None,
    prefix: str | None = None,
) -> pd.DataFrame:
    """What became of each job of a replay batch (columns in the module docstring).

    With ``wait_s``, polls until every job succeeded or failed again, or
    ``wait_s`` seconds passed, and returns the last state. With the archive
    on, it also waits (within the same ``wait_s``) until the archive recorded
    those outcomes (the archiver applies them within a second or so), so that
    ``archive()`` and ``history()`` read next show them.
    """
    check_batch(batch)
    deadline = time.monotonic() + (wait_s or 0.0)
    with redis_session(client, prefix, "read a replay's outcomes") as (redis_client, keys):
        while True:
            frame = _status_everywhere(redis_client, partitions(redis_client, keys), batch)
            if wait_s is None or frame["status"].isin(FINAL_STATUSES).all() or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        if wait_s is not None and frame["status"].isin(FINAL_STATUSES).all():
            _wait_for_archived_outcomes(keys, batch, deadline)
    return frame


def _wait_for_archived_outcomes(keys: Keys, batch: str, deadline: float) -> None:
    """Poll the archive until no row of ``batch`` lacks its replay outcome, or ``deadline``."""
    with open_archive() as archive:
        if not archive.enabled:
            return
        while time.monotonic() < deadline:
            conn = archive.connection()
            if conn is None:
                return
            row = conn.execute(
                f"SELECT count(*) FROM {TABLE} WHERE queue = %s AND replay_batch = %s AND replay_outcome IS NULL",
                (keys.prefix, batch),
            ).fetchone()
            if not row or row[0] == 0:
                return
            time.sleep(0.2)


def _batch_start(batch: str) -> str:
    """The lowest dead id a job of ``batch`` can have (the batch id starts with its time)."""
    try:
        made = datetime.strptime(batch.partition("-")[0], BATCH_TIME).replace(tzinfo=UTC)
    except ValueError:
        return "-"
    return entry_floor(parse_since(made))


def _status_everywhere(client: Any, parts: list[Keys], batch: str) -> pd.DataFrame:
    """The status frame of ``batch`` over every partition (each keeps the outcomes of its jobs), or,
    once Redis has forgotten the batch (after 24 hours), the archive's record of it."""
    frames = [frame for frame in (_status(client, keys, batch) for keys in parts) if frame is not None]
    if not frames:
        archived = _status_from_archive(client, parts[0], batch)
        if archived is None:
            raise OpslibError(
                f"no replay batch {batch!r} in Redis nor in the archive: no replay used that id; "
                "use the batch column of replay() or replay_kind()"
            )
        frames = [archived]
    frame = combine(frames)
    return frame.iloc[sorted(range(len(frame)), key=lambda n: entry_order(frame["dead_id"].iat[n]))].reset_index(
        drop=True
    )


#: A batch's rows in the archive, with the row of the entry each failed again as (outcome, error, attempts).
ARCHIVED_BATCH = (
    f"SELECT r.partition, r.dead_id, r.replay_outcome, r.replay_dead_id, r.replayed_at, again.error,"
    f" again.attempts, again.dead_at FROM {TABLE} r LEFT JOIN {TABLE} again ON again.queue = r.queue"
    f" AND again.partition = r.partition AND again.dead_id = r.replay_dead_id"
    f" WHERE r.queue = %s AND r.replay_batch = %s ORDER BY r.dead_at, r.dead_id"
)


def _status_from_archive(client: Any, keys: Keys, batch: str) -> pd.DataFrame | None:
    """``batch``'s outcomes as the archive keeps them for good (None: the archive is off, or holds no
    row of it); the moves and outcomes still in the log are applied first."""
    apply_pending_log(client=client, prefix=keys.prefix)
    with open_archive() as archive:
        conn = archive.connection() if archive.enabled else None
        rows = conn.execute(ARCHIVED_BATCH, (keys.prefix, batch)).fetchall() if conn is not None else []
    if not rows:
        return None
    return archived_status_to_frame(batch, rows)


def _status(client: Any, keys: Keys, batch: str) -> pd.DataFrame | None:
    outcomes = client.hgetall(keys.replay(batch))
    if not outcomes:
        return None
    marker = f'"replay_batch":"{batch}"'
    dead_again = [
        (entry_id, fields)
        for entry_id, fields in client.xrange(keys.dead, min=_batch_start(batch), max="+")
        if text(fields.get(b"replay_batch", fields.get("replay_batch", b""))) == batch
    ]
    waiting = [
        decode_member(member).get("replay_of", "")
        for member, _score in client.zscan_iter(keys.delayed, match=f"*{marker}*", count=1000)
    ]
    queued = {}
    for dead_id, value in outcomes.items():
        outcome = parse_outcome(value)
        if outcome.get("status") == RECORDED_QUEUED and outcome.get("new_id"):
            queued[text(dead_id)] = str(outcome["new_id"])
    pipe = client.pipeline(transaction=False)
    for new_id in queued.values():
        pipe.xrange(keys.jobs, min=new_id, max=new_id)
        pipe.xpending_range(keys.jobs, GROUP, min=new_id, max=new_id, count=1)
    replies = pipe.execute(raise_on_error=False) if queued else []
    where = {}
    for index, dead_id in enumerate(queued):
        found, running = replies[2 * index], replies[2 * index + 1]
        if isinstance(running, list) and running:
            where[dead_id] = WHERE_RUNNING
        elif isinstance(found, list) and found:
            where[dead_id] = WHERE_JOBS
    return replay_status_to_frame(batch, outcomes, dead_again, where, waiting, keys.partition)
