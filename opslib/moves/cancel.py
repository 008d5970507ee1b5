"""Cancel jobs wherever they are: stop one that runs, remove one that has not started.

``cancel(ids, *, reason, by=None, dry_run=False)``
    ``ids``: job ids or entry ids of ``jobs`` (one, a list, or a frame with
    a ``job_id`` column). For each, every partition's ``jobs`` and
    ``delayed`` (of every named queue in use) are looked at:

    - an entry no worker has read yet is removed (XDEL) and never starts;
    - an entry pending to a worker is marked: the worker running it stops it
      (async: ``CancelledError``; plain: ``job.stopping``, then the kill for
      ``isolation="process"``) and acknowledges it, never retried nor
      dead-lettered;
    - a delayed job (a retry, or a later run), a throttled one (deferred by
      its kind's throttle, in ``throttled``) or a parked one (of a paused
      kind, in ``parked``) or a fair job waiting for its key's turn (in ``fair:queue``)
      is taken out of its set (the cancel_delayed
      script, recorded in the archive as discarded) and never starts.

    Each entry moves in one script (cancel_entry), and each member in one
    (cancel_delayed), so a worker reading the entry, promoting the member or
    unparking it at that moment and this call never both take it. The marks go to
    the partition's ``cancels`` (:mod:`worker.store.cancels`): a worker that
    missed the announcement on the ``cancel`` channel (a dropped
    subscription, a reconnect) reads them at its next claim refresh, and
    ``opslib.find`` shows them (``where`` = ``cancelled``, with by and why).
    Each call that cancels also trims the marks a day old whose entry no
    worker holds (:func:`worker.store.cancels.trim_marks`).

Returns one row per id: id, job_id, kind, status (``cancelled``: it was
running; ``removed``: it had not started; ``finished``: already done, dead or
cancelled, nothing to do; ``not found``; in a dry run ``would cancel`` /
``would remove``), batch (``""`` in a dry run, which changes nothing). Every
call that cancels is in ``opslib.actions()``. A reason is required.

Example::

    >>> opslib.cancel(["b1f0c2", "1764694800000-3"], reason="wrong template sent, INC-2217")
                   id  job_id           kind     status             batch
    0          b1f0c2  b1f0c2     send_email  cancelled  20261202T014012Z-…
    1  1764694800000-3  9a2e41  render_tickets    removed  20261202T014012Z-…
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import redis

from opslib.actions import Action
from opslib.bounded import every_member
from opslib.columns import TEXT, typed_frame
from opslib.connection import settings
from opslib.find import on_jobs
from opslib.moves.batches import new_batch_id
from opslib.moves.delayed_jobs import job_ids_of
from opslib.operator import Operator
from opslib.session import Servers, Session
from worker.store.cancels import announcement, mark_cutoff, marks_of, new_mark, trim_marks
from worker.store.failures import now_iso
from worker.store.keys import Keys
from worker.store.wire import decode_member, job_id_of, parked_fields, text

CANCELLED, REMOVED, FINISHED, NOT_FOUND = "cancelled", "removed", "finished", "not found"
WOULD_CANCEL, WOULD_REMOVE = "would cancel", "would remove"
#: When an id names several places, the row says the most telling: running first, then removed.
ORDER = (CANCELLED, WOULD_CANCEL, REMOVED, WOULD_REMOVE, FINISHED)
CANCEL_COLUMNS = {"id": TEXT, "job_id": TEXT, "kind": TEXT, "status": TEXT, "batch": TEXT}
NEEDS = (
    "cancel needs a user that may run scripts, write the queue's keys and publish on its cancel channel "
    "(the operator role: EVALSHA with XDEL, HSET, ZREM; PUBLISH); a read-only user can run it with dry_run=True"
)


def cancel(
    ids: object,
    *,
    reason: str,
    by: str | None = None,
    dry_run: bool = False,
    client: redis.Redis | None = None,
    prefix: str | None = None,
) -> pd.DataFrame:
    """Stop the running jobs among ``ids`` and remove those that have not started (module docstring)."""
    operator = Operator.acting("cancel", by=by, reason=reason)
    wanted = job_ids_of(ids)
    action = "look for the jobs to cancel" if dry_run else "cancel jobs"
    with Servers(client, prefix).session(action, needs="" if dry_run else NEEDS) as session:
        batch = "" if dry_run else new_batch_id()
        mark = new_mark(operator.by, operator.reason or "", now_iso(), batch)
        rows = [_cancel_one(session, value, mark, operator, dry_run) for value in wanted]
        if not dry_run:
            taken = [row for row in rows if row[3] in (CANCELLED, REMOVED)]
            if taken:
                note = f"{operator.by}: {operator.reason}"
                session.client.publish(session.keys.cancel_channel, announcement([row[1] for row in taken], note))
            kinds = {row[2] for row in taken}
            kind = kinds.pop() if len(kinds) == 1 else ""
            session.record(Action("cancel", operator, kind, entries=len(taken), batch=batch))
            session.settle_archive()
            cutoff = mark_cutoff()
            for scripts in session.scripts:
                trim_marks(scripts, cutoff)  # the marks that have done their work go (worker.store.cancels)
    columns = {name: [row[n] for row in rows] for n, name in enumerate(("id", "job_id", "kind", "status"))}
    frame = typed_frame({**columns, "batch": [batch] * len(rows)}, CANCEL_COLUMNS)
    frame.attrs["batch"] = batch
    return frame


def _cancel_one(session: Session, value: str, mark: str, operator: Operator, dry_run: bool) -> tuple[str, ...]:
    """(id, job_id, kind, status) of one id asked for, its entries and delayed members cancelled."""
    found: list[str] = []
    job_id, kind = "", ""
    for keys, scripts in zip(session.parts, session.scripts, strict=True):
        for row in on_jobs(session.client, keys, value, []):
            if value not in (row["id"], row["job_id"]):
                continue  # a payload value, not this job
            status, of = scripts.cancel_entry(row["id"], mark, dry_run=dry_run, lock=row.get("lock"))
            found.append(text(status))
            job_id, kind = text(of) or job_id or row["job_id"], row["kind"]
    for keys in session.parts:
        for source, member, fields in held_members(session.client, keys, value):
            job_id, kind = value, fields.get("kind", "")
            if dry_run:
                found.append(WOULD_REMOVE)
            else:
                found.append(_remove_held(session, keys.partition, source, member, value, mark, operator))
    if not found and any(marks_of(session.client, keys, [value]) for keys in session.parts):
        found.append(FINISHED)  # cancelled before: nothing left to do
    status = next((s for s in ORDER if s in found), NOT_FOUND)
    return value, job_id, kind, status


def held_members(client: Any, keys: Keys, job_id: str) -> list[tuple[str, bytes, dict[str, str]]]:
    """(set, member, fields) of ``job_id``'s members that wait in ``keys``' ``delayed``, ``throttled``,
    ``fair:queue`` (same members) and ``parked`` (kind NUL order NUL fields as a JSON array), each set read
    whole, a page a command."""
    found: list[tuple[str, bytes, dict[str, str]]] = []
    for source in (keys.delayed, keys.throttled, keys.fair_queue, keys.parked):
        for member in every_member(client, source):
            try:
                fields = parked_fields(member) if source == keys.parked else decode_member(member)
            except ValueError:
                continue  # malformed: the worker dead-letters it when it is due
            if job_id_of(fields) == job_id:
                found.append((source, member, fields))
    return found


def _remove_held(
    session: Session, partition: int, source: str, member: bytes, job_id: str, mark: str, operator: Operator
) -> str:
    """Take one waiting member out (recorded in the archive as discarded; its unique key released), and mark
    the job removed."""
    said = json.loads(mark)
    by, reason = operator.by, operator.reason or ""
    moved: Any = session.scripts[partition].cancel_delayed(
        member, said["batch"], by=by, reason=reason, at=said["at"], record=settings().archive_on, source=source
    )
    if not moved:
        return FINISHED  # promoted or unparked meanwhile: its entry on jobs was looked at above, or it ran
    session.client.hset(session.parts[partition].cancels, job_id, json.dumps({**said, "status": REMOVED}))
    return REMOVED
