"""Act on delayed jobs: run them now, or cancel them before they run.

``run_now(job_ids, *, dry_run=False)``
    Moves each job's member from ``delayed`` onto ``jobs`` at once (the
    run_now script: ZSCORE + XADD + ZREM), its fields unchanged.
``cancel_delayed(job_ids, *, reason, by=None, dry_run=False)``
    Takes each job's member out of ``delayed`` (the cancel_delayed script),
    so it never runs, and in the same script adds a ``discarded`` record to
    ``jobs:dead:log`` (while the archive is on): once the archiver applies
    it, ``archive(status="discarded")`` holds the job with reason
    ``cancelled``, its ``discard_reason``, ``discarded_by`` and
    ``discard_batch``, under a dead id ``<ms>-<seq>-cancelled`` that no
    ``jobs:dead`` entry can have (see :mod:`worker.archive.dead_log`).

``job_ids`` is one job id, a list of them, or a ``delayed()`` frame (its
``job_id`` column). A job id names every member of ``delayed`` with that
``job_id`` (or ``outbox_id``). Each member moves in one script, so a worker
promoting the same job at the same moment and this call never both act: a
job runs once, or is cancelled, never both; the loser reports ``missing``.

Both return one row per member moved (one per job id asked for when none
matched): job_id (str), status (str: queued / cancelled / missing, or in a
dry run would queue / would cancel), batch (str: one id for the call, ``""``
in a dry run, which writes nothing). Index 0..n-1; the batch is also in
``frame.attrs["batch"]``.

Example::

    >>> later = opslib.delayed("send_reminder")
    >>> opslib.run_now(later.head(3), dry_run=True)
       job_id        status batch
    0  r-1001   would queue
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pandas as pd
import redis

from opslib.actions import Action, kind_of
from opslib.bounded import every_member
from opslib.columns import TEXT, typed_frame
from opslib.connection import settings
from opslib.errors import OpslibError
from opslib.frames import job_id_of
from opslib.moves.batches import new_batch_id
from opslib.moves.locate import CHUNK
from opslib.operator import Operator
from opslib.session import Servers
from worker.store.failures import now_iso
from worker.store.keys import Keys
from worker.store.scripts import Scripts
from worker.store.wire import decode_member, text

QUEUED, CANCELLED, MISSING = "queued", "cancelled", "missing"
WOULD_QUEUE, WOULD_CANCEL = "would queue", "would cancel"
MOVE_COLUMNS = {"job_id": TEXT, "status": TEXT, "batch": TEXT}
NEEDS_WRITE = (
    "{action} needs a user that may run scripts and write the queue's keys (EVALSHA: ZSCORE, ZREM{more}); "
    "a read-only user can run it with dry_run=True"
)


def job_ids_of(ids: object) -> list[str]:
    """The job ids in ``ids``: one id, a list, a Series, or a ``delayed()`` frame (its ``job_id`` column)."""
    if isinstance(ids, str | bytes):
        values: Iterable[object] = [ids]
    elif isinstance(ids, pd.DataFrame):
        if "job_id" not in ids.columns:
            raise OpslibError("a frame of jobs must have a job_id column (a delayed() frame, or a selection of one)")
        values = ids["job_id"]
    elif isinstance(ids, Iterable):
        values = ids
    else:
        raise OpslibError(f"job_ids must be job ids (a list, or a delayed() frame), got {type(ids).__name__}")
    found: list[str] = []
    for value in values:
        job_id = text(value) if isinstance(value, bytes | str) else value
        if not isinstance(job_id, str) or not job_id.strip():
            raise OpslibError(
                f"{value!r} is not a job id; use the job_id column of delayed() (a malformed member has none: "
                "the worker dead-letters it when it is due)"
            )
        found.append(job_id)
    return list(dict.fromkeys(found))


def members_by_job(client: Any, parts: Sequence[Keys], job_ids: Sequence[str]) -> dict[str, list[tuple[int, bytes]]]:
    """Each asked job id's members of ``delayed``, with their partition (each partition's set read once,
    whole, a page a command: ``delayed`` holds retries and later jobs)."""
    wanted = set(job_ids)
    found: dict[str, list[tuple[int, bytes]]] = {job_id: [] for job_id in job_ids}
    for keys in parts:
        for member in every_member(client, keys.delayed):
            try:
                job_id = job_id_of(decode_member(member))
            except ValueError:
                continue
            if job_id in wanted:
                found[job_id].append((keys.partition, member))
    return found


def _kind_of_member(member: bytes) -> str:
    try:
        return decode_member(member).get("kind", "")
    except ValueError:
        return ""


def moves_to_frame(rows: Sequence[tuple[str, str]], batch: str) -> pd.DataFrame:
    """The frame of ``(job_id, status)`` rows of one call."""
    columns = {
        "job_id": [job_id for job_id, _ in rows],
        "status": [status for _, status in rows],
        "batch": [batch] * len(rows),
    }
    frame = typed_frame(columns, MOVE_COLUMNS)
    frame.attrs["batch"] = batch
    return frame


@dataclass(frozen=True)
class DelayedMove(ABC):
    """A move of delayed jobs made by ``operator``: each member of ``delayed`` in one script, so a worker
    promoting the same job at the same moment and this move never both act."""

    verb: ClassVar[str]
    """``"run_now"`` or ``"cancel_delayed"``: the action's name."""
    action: ClassVar[str]
    """What it does, for error messages (``"run delayed jobs now"``)."""
    done: ClassVar[str]
    would: ClassVar[str]
    """The status of a member moved, and in a dry run of one that would be."""
    needs: ClassVar[str]

    operator: Operator

    @abstractmethod
    def call(self, scripts: Scripts, member: bytes, pipe: Any, batch: str) -> Any:
        """Queue the script that moves one member on ``pipe``."""


@dataclass(frozen=True)
class RunNow(DelayedMove):
    """Onto ``jobs`` now, its fields unchanged (the run_now script)."""

    verb, action, done, would = "run_now", "run delayed jobs now", QUEUED, WOULD_QUEUE
    needs = NEEDS_WRITE.format(action="run_now", more=", XADD")

    def call(self, scripts: Scripts, member: bytes, pipe: Any, batch: str) -> Any:
        return scripts.run_now(member, client=pipe)


@dataclass(frozen=True)
class CancelDelayed(DelayedMove):
    """Out of ``delayed`` before it runs, recorded as discarded with who and why (the cancel_delayed
    script); ``at`` and ``record`` (the archive is on) are the call's."""

    verb, action, done, would = "cancel_delayed", "cancel delayed jobs", CANCELLED, WOULD_CANCEL
    needs = NEEDS_WRITE.format(action="cancel_delayed", more=", XADD to jobs:dead:log")

    at: str
    record: bool

    def call(self, scripts: Scripts, member: bytes, pipe: Any, batch: str) -> Any:
        by, reason = self.operator.by, self.operator.reason or ""
        return scripts.cancel_delayed(member, batch, by=by, reason=reason, at=self.at, record=self.record, client=pipe)


def move_delayed(move: DelayedMove, ids: object, servers: Servers, *, dry_run: bool) -> pd.DataFrame:
    """Run ``move`` on every member of the asked jobs; the frame of what became of each."""
    job_ids = job_ids_of(ids)
    action = "read the delayed jobs" if dry_run else move.action
    with servers.session(action, needs="" if dry_run else move.needs) as session:
        members = members_by_job(session.client, session.parts, job_ids)
        plan = [(job_id, member) for job_id in job_ids for member in members[job_id]]
        if dry_run:
            rows = [(job_id, move.would) for job_id, _ in plan]
            rows += [(job_id, MISSING) for job_id in job_ids if not members[job_id]]
            return moves_to_frame(rows, "")
        batch = new_batch_id()
        results: list[Any] = []
        for start in range(0, len(plan), CHUNK):
            pipe = session.client.pipeline(transaction=False)
            for _job_id, (partition, member) in plan[start : start + CHUNK]:
                move.call(session.scripts[partition], member, pipe, batch)
            results += pipe.execute()
        moved = sum(1 for result in results if result)
        kind = kind_of(ids, (_kind_of_member(member) for _job_id, (_p, member) in plan))
        session.record(Action(move.verb, move.operator, kind, entries=moved, batch=batch))
        session.settle_archive()  # a cancelled delayed job is recorded there as discarded
    rows = [(job_id, move.done if result else MISSING) for (job_id, _), result in zip(plan, results, strict=True)]
    rows += [(job_id, MISSING) for job_id in job_ids if not members[job_id]]
    return moves_to_frame(rows, batch)


def run_now(
    job_ids: object,
    *,
    by: str | None = None,
    dry_run: bool = False,
    client: redis.Redis | None = None,
    prefix: str | None = None,
) -> pd.DataFrame:
    """Move delayed jobs onto ``jobs`` now (columns in the module docstring); ``dry_run`` writes nothing."""
    move = RunNow(Operator.acting("run_now", by=by, reason=None, required=False))
    return move_delayed(move, job_ids, Servers(client, prefix), dry_run=dry_run)


def cancel_delayed(
    job_ids: object,
    *,
    reason: str,
    by: str | None = None,
    dry_run: bool = False,
    client: redis.Redis | None = None,
    prefix: str | None = None,
) -> pd.DataFrame:
    """Take delayed jobs out before they run and record them as discarded (columns in the module docstring).

    ``reason`` is required (it goes to the archive with ``by``, the
    operating-system user unless given); ``dry_run`` writes nothing.
    """
    operator = Operator.acting("cancel_delayed", by=by, reason=reason)
    move = CancelDelayed(operator, at=now_iso(), record=settings().archive_on)
    return move_delayed(move, job_ids, Servers(client, prefix), dry_run=dry_run)
