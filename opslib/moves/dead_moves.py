"""A move out of ``jobs:dead``: the one interface replay and discard implement, and the one path both take.

Both look each id up in its partition's ``jobs:dead`` (or the archive, for ids
the stream was trimmed of: :mod:`opslib.moves.locate`), return the plan in a dry run,
take the streamed entries with a script per entry (pipelined), take the rest
from the archive under the log lock, record the action, and report one row
per id. A :class:`DeadMove` states only what differs: its verb and rights,
the script it runs on one entry, how it takes entries from the archive and
the frame it reports. A replay's script returns the new entry id, a
discard's a truthy mark; a falsy result is an entry someone else took first
(``missing``). What is moved is a list of ids or a :class:`Selection` of one
kind's dead letters (the ``_kind`` forms), resolved inside the move's session.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, ClassVar

import pandas as pd

from opslib.actions import Action, kind_of
from opslib.moves.batches import new_batch_id
from opslib.moves.locate import Located, Progress, dead_ids_of, locate, pipelined
from opslib.moves.selection import Selection
from opslib.operator import Operator
from opslib.session import Servers, Session
from worker.store.failures import now_iso
from worker.store.keys import Keys
from worker.store.scripts import Scripts
from worker.store.trace_context import sending


@dataclass(frozen=True)
class Batch:
    """One move's batch: its id and time, whether the scripts record the move for the archive, and the
    trace context the moved jobs carry ({} unless the move is traced and a span is active)."""

    id: str
    at: str
    record: bool
    context: Mapping[str, str]


@dataclass(frozen=True)
class DeadMove(ABC):
    """A way out of ``jobs:dead``, made by ``operator``."""

    verb: ClassVar[str]
    """``"replay"`` or ``"discard"``: the action's name, and the progress bar's."""
    needs: ClassVar[str]
    """The rights it needs, for the message of a refused user."""
    traced: ClassVar[bool] = False
    """Inside an active span, the moves run under a ``<verb> <queue>`` span linked to each entry's last
    attempt (:func:`worker.store.trace_context.sending`), whose context the jobs carry."""

    operator: Operator

    def detail(self) -> dict[str, Any]:
        """What the action's record keeps beside who, why and how many (a replay's patch)."""
        return {}

    @abstractmethod
    def take(self, scripts: Scripts, dead_id: str, batch: Batch, pipe: Any) -> Any:
        """Queue the script that takes ``dead_id`` from its partition's ``jobs:dead`` on ``pipe``."""

    @abstractmethod
    def take_archived(
        self, pg: Any, session: Session, keys: Keys, dead_ids: list[str], batch: Batch
    ) -> Mapping[str, Any]:
        """Take ``dead_ids`` of ``keys``' partition from the archive; dead id -> result, for those taken."""

    @abstractmethod
    def to_frame(self, found: Located, results: Sequence[Any], batch: str) -> pd.DataFrame:
        """The frame of each id ``found`` and its result (a dry run when ``batch`` is ``""``)."""


def move_dead(
    move: DeadMove, what: object, servers: Servers, *, dry_run: bool, on_progress: Progress | None = None
) -> pd.DataFrame:
    """Move ``what`` (dead ids, a frame of them, or a :class:`Selection`) out of ``jobs:dead`` and return
    the move's frame of each id's result; ``dry_run`` writes nothing and needs no write rights."""
    action = "look up dead letters" if dry_run else f"{move.verb} dead letters"
    with servers.session(action, needs="" if dry_run else move.needs) as session:
        asked = what.targets(session) if isinstance(what, Selection) else what
        found = locate(session.client, session.parts, dead_ids_of(asked, session.parts), session.archive)
        if dry_run:
            return move.to_frame(found, found.found(), "")
        links = [found.links[n] for n in found.streamed()]
        tracing: AbstractContextManager[dict[str, str]] = (
            sending(session.keys.jobs, len(links), move.verb, links) if move.traced else nullcontext({})
        )
        with tracing as context:
            batch = Batch(new_batch_id(), now_iso(), session.archive.enabled, context)
            results = _take_all(move, found, session, batch, on_progress)
        moved = sum(1 for result in results if result)
        kind = kind_of(asked, found.kinds)
        session.record(Action(move.verb, move.operator, kind, entries=moved, batch=batch.id, detail=move.detail()))
        session.settle_archive()
        return move.to_frame(found, results, batch.id)


def _take_all(
    move: DeadMove, found: Located, session: Session, batch: Batch, on_progress: Progress | None
) -> list[Any]:
    """Take each found entry: from its ``jobs:dead`` by script (pipelined), the rest from the archive
    under the log lock. The results in the targets' order (None: not taken)."""
    scripts = session.scripts
    streamed = found.streamed()
    results = pipelined(
        session.client,
        streamed,
        lambda pipe, n: move.take(scripts[found.where[n]], found.dead_ids[n], batch, pipe),
        move.verb,
        on_progress,
    )
    done: dict[int, Any] = {n: result for n, result in zip(streamed, results, strict=True) if result}
    missed = found.from_archive(done)
    pg = session.archive.connection() if missed and session.archive.enabled else None
    for p, numbers in missed.items() if pg is not None else ():
        taken = move.take_archived(pg, session, session.parts[p], [found.dead_ids[n] for n in numbers], batch)
        for n in numbers:
            if found.dead_ids[n] in taken:
                done[n] = taken[found.dead_ids[n]]
                found.where[n] = p  # the archive held it
    return [done.get(n) for n in range(len(found.dead_ids))]
