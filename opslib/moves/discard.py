"""Discard dead letters that must never run (a refunded or duplicate order), with a reason on record.

Each entry leaves ``jobs:dead`` by the discard script (``worker/store/lua/discard.lua``:
XDEL + a ``discarded`` record in ``jobs:dead:log`` carrying the entry, who and
why, in one step); the archiver marks its row ``discarded`` with
``discarded_at``, ``discarded_by``, ``discard_reason`` and ``discard_batch``.
An id that ``jobs:dead`` no longer holds but the archive holds as ``dead``
is discarded there (:mod:`opslib.moves.archived`). A replay and a discard racing
on the same entries leave each in exactly one of the two states.

``discard(ids, *, reason, by=None, dry_run=False, conn=None)``, and
``discard_kind(kind, *, reason, signature=None, error_contains=None, since=None, by=None, dry_run=False, conn=None)``
    One row per dead id: dead_id, status (str: discarded / missing / would
    discard), batch (str, the same on every row, ``""`` in a dry run, which
    writes nothing), partition (int64: the queue partition holding the entry,
    -1 when found in none). Index 0..n-1; the batch is also in
    ``frame.attrs["batch"]``. ``reason`` is required; ``by`` defaults to the
    operating-system user.

Example::

    >>> plan = discard_kind("render_tickets", reason="orders refunded, INC-2211", since="2026-11-30 21:00",
    ...                     dry_run=True)                                    # writes nothing
    >>> discard(plan.dead_id, reason="orders refunded, INC-2211").status.value_counts()
    discarded    12
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Unpack

import pandas as pd

from opslib.frames import discard_to_frame
from opslib.moves.archived import discard_from_archive
from opslib.moves.dead_moves import Batch, DeadMove, move_dead
from opslib.moves.locate import Located, Progress
from opslib.moves.selection import Filters, Selection
from opslib.operator import Operator
from opslib.session import Servers, Session, with_servers
from worker.store.keys import Keys
from worker.store.scripts import Scripts

NEEDS_WRITE = (
    "discard needs a user that may run scripts and write the queue's keys (EVALSHA of the discard script: "
    "XRANGE, XDEL, XADD); a read-only user can run discard(..., dry_run=True)"
)


@dataclass(frozen=True)
class Discard(DeadMove):
    """Out for good, with who and why on record (``discard.lua``; the archive's row for an entry only
    the archive holds)."""

    verb = "discard"
    needs = NEEDS_WRITE

    def take(self, scripts: Scripts, dead_id: str, batch: Batch, pipe: Any) -> Any:
        by, reason = self.operator.by, self.operator.reason or ""
        return scripts.discard(dead_id, batch.id, by=by, reason=reason, at=batch.at, record=batch.record, client=pipe)

    def take_archived(
        self, pg: Any, session: Session, keys: Keys, dead_ids: list[str], batch: Batch
    ) -> Mapping[str, Any]:
        by, reason = self.operator.by, self.operator.reason or ""
        taken = discard_from_archive(pg, session.client, keys, dead_ids, batch.id, by=by, reason=reason, at=batch.at)
        return dict.fromkeys(taken, True)

    def to_frame(self, found: Located, results: Sequence[Any], batch: str) -> pd.DataFrame:
        return discard_to_frame(
            found.dead_ids, [bool(r) for r in results], batch, dry_run=not batch, partitions=found.where
        )


@with_servers
def discard(
    ids: object,
    *,
    reason: str,
    by: str | None = None,
    dry_run: bool = False,
    on_progress: Progress | None = None,
    servers: Servers,
) -> pd.DataFrame:
    """Take dead letters out for good, recording who and why (columns in the module docstring).

    ``ids`` is one dead id, a list of them, or a ``dead_letters()`` frame (its
    index; its ``partition`` column says where each entry is; a bare id found
    in two partitions is refused). ``dry_run`` lists exactly what would be
    taken and writes nothing.
    """
    move = Discard(Operator.acting("discard", by=by, reason=reason))
    return move_dead(move, ids, servers, dry_run=dry_run, on_progress=on_progress)


@with_servers
def discard_kind(
    kind: str,
    *,
    reason: str,
    by: str | None = None,
    dry_run: bool = False,
    servers: Servers,
    **filters: Unpack[Filters],
) -> pd.DataFrame:
    """Discard every dead letter of ``kind`` that matches the filters (as ``replay_kind`` selects them).

    Run it with ``dry_run=True`` first: it returns the same rows with status
    ``would discard`` and writes nothing.
    """
    move = Discard(Operator.acting("discard", by=by, reason=reason))
    selection = Selection(kind, **filters)
    return move_dead(move, selection, servers, dry_run=dry_run)
