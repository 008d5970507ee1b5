"""Why a replay or a discard did not find an id: taken already (replayed, discarded), or never a dead letter.

A move reports the ids it could not take as ``missing``. To the person who
typed ``replay 1-0``, "taken already" and "no such dead letter" are different
mistakes, so the command line asks the archive (reads only) which ids it has
ever held, and says which were never there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opslib.connection import queue_keys
from opslib.errors import OpslibError
from opslib.moves.archived import open_archive
from worker.archive.table import TABLE

EVER_ARCHIVED = f"SELECT dead_id, status FROM {TABLE} WHERE queue = %s AND dead_id = ANY(%s)"
NEVER = "never a dead letter of this queue"


def absent_reasons(dead_ids: Sequence[str], *, conn: Any = None, prefix: str | None = None) -> dict[str, str]:
    """For each of ``dead_ids``: ``"replayed already"``, ``"discarded already"``, ``"still dead in the archive"``
    or :data:`NEVER`; ``{}`` when the archive is off or does not answer (nothing more is known)."""
    if not dead_ids:
        return {}
    try:
        with open_archive(conn) as archive:
            if not archive.enabled:
                return {}
            connection = archive.connection()
            rows = (
                []
                if connection is None
                else connection.execute(EVER_ARCHIVED, (queue_keys(prefix).prefix, list(dead_ids))).fetchall()
            )
    except OpslibError:
        return {}
    held = {dead_id: status for dead_id, status in rows}
    return {
        dead_id: (f"{held[dead_id]} already" if held[dead_id] != "dead" else "still dead in the archive")
        if dead_id in held
        else NEVER
        for dead_id in dead_ids
    }
