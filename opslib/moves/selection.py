"""The dead letters of one kind that ``replay_kind`` and ``discard_kind`` move: one selection for both.

The filters (``signature``, ``error_contains``, ``since``) are read the same
way for a replay and a discard, over every partition's ``jobs:dead`` and over
the archive's rows still ``dead`` (those the stream was trimmed of), so a
dry run of either lists exactly what the other would take.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import redis

from opslib.connection import queue_keys
from opslib.errors import OpslibError
from opslib.frames import entry_order
from opslib.moves.archived import archived_dead, open_archive
from opslib.moves.locate import NOWHERE, Target
from opslib.queries import dead_letters


def of_kind(
    kind: str,
    *,
    signature: str | None,
    error_contains: str | None,
    since: object,
    client: redis.Redis | None,
    prefix: str | None,
    conn: Any,
) -> pd.DataFrame:
    """``kind``'s dead letters matching the filters as the frame ``replay`` and ``discard`` take
    (``dead_id``, ``partition``: -1 for an entry only the archive holds, ``kind``), oldest first."""
    targets = _targets(
        kind, signature=signature, error_contains=error_contains, since=since, client=client, prefix=prefix, conn=conn
    )
    return pd.DataFrame(
        {
            "dead_id": [dead_id for dead_id, _ in targets],
            "partition": [NOWHERE if p is None else p for _, p in targets],
            "kind": [kind] * len(targets),
        }
    )


def _targets(
    kind: str,
    *,
    signature: str | None,
    error_contains: str | None,
    since: object,
    client: redis.Redis | None,
    prefix: str | None,
    conn: Any,
) -> list[Target]:
    """(dead id, partition) of ``kind``'s dead letters matching the filters, in every partition's
    ``jobs:dead`` and in the archive (as ``dead``), oldest first."""
    if error_contains is not None and (not isinstance(error_contains, str) or not error_contains):
        raise OpslibError(f"error_contains must be a non-empty string, got {error_contains!r}")
    dead = dead_letters(kind, since=since, signature=signature, client=client, prefix=prefix)
    if error_contains is not None:
        dead = dead[dead["error"].str.contains(error_contains, regex=False)]
    found = [(str(dead_id), int(p)) for dead_id, p in zip(dead.index, dead["partition"], strict=True)]
    with open_archive(conn) as archive:
        pg = archive.connection() if archive.enabled else None
        if pg is not None:
            keys = queue_keys(prefix)
            found += archived_dead(pg, keys, kind, signature=signature, error_contains=error_contains, since=since)
    return sorted(set(found), key=lambda target: (entry_order(target[0]), target[1]))
