"""The dead letters of one kind that ``replay_kind`` and ``discard_kind`` move: one selection for both.

The filters (``signature``, ``error_contains``, ``since``) are read the same
way for a replay and a discard, over every partition's ``jobs:dead`` and over
the archive's rows still ``dead`` (those the stream was trimmed of), so a
dry run of either lists exactly what the other would take. A
:class:`Selection` is checked when it is made, and resolved to its entries
inside the move's session (:func:`opslib.moves.dead_moves.move_dead`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import pandas as pd

from opslib.errors import OpslibError
from opslib.frames import entry_order
from opslib.moves.archived import archived_dead
from opslib.moves.locate import NOWHERE, Target
from opslib.queries import dead_letters
from opslib.session import Session


class Filters(TypedDict, total=False):
    """The keywords ``replay_kind`` and ``discard_kind`` take to narrow a kind's dead letters (each None or
    absent: no filter): a :class:`Selection`'s fields beside its kind."""

    signature: str | None
    error_contains: str | None
    since: object


@dataclass(frozen=True)
class Selection:
    """``kind``'s dead letters, kept to one failure group (``signature``), to errors containing a text
    (``error_contains``, case-sensitive) and to entries dead at or after ``since``."""

    kind: str
    signature: str | None = None
    error_contains: str | None = None
    since: object = None

    def __post_init__(self) -> None:
        if self.error_contains is not None and (not isinstance(self.error_contains, str) or not self.error_contains):
            raise OpslibError(f"error_contains must be a non-empty string, got {self.error_contains!r}")

    def targets(self, session: Session) -> pd.DataFrame:
        """The matching entries as the frame ``replay`` and ``discard`` take (``dead_id``, ``partition``:
        -1 for an entry only the archive holds, ``kind``), oldest first."""
        found = sorted(set(self._found(session)), key=lambda target: (entry_order(target[0]), target[1]))
        return pd.DataFrame(
            {
                "dead_id": [dead_id for dead_id, _ in found],
                "partition": [NOWHERE if p is None else p for _, p in found],
                "kind": [self.kind] * len(found),
            }
        )

    def _found(self, session: Session) -> list[Target]:
        """(dead id, partition) of the matching entries in every partition's ``jobs:dead`` and in the
        archive (as ``dead``)."""
        where = session.servers
        dead = dead_letters(
            self.kind, since=self.since, signature=self.signature, client=where.client, prefix=where.prefix
        )
        if self.error_contains is not None:
            dead = dead[dead["error"].str.contains(self.error_contains, regex=False)]
        position = {(keys.queue, keys.partition): n for n, keys in enumerate(session.parts)}
        pairs = zip(dead.index, dead["queue"], dead["partition"], strict=True)
        found: list[Target] = [(str(dead_id), position.get((str(q), int(p)), NOWHERE)) for dead_id, q, p in pairs]
        pg = session.archive.connection() if session.archive.enabled else None
        if pg is not None:
            found += archived_dead(
                pg,
                session.keys,
                self.kind,
                signature=self.signature,
                error_contains=self.error_contains,
                since=self.since,
            )
        return found
