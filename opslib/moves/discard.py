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

import getpass
import os
from typing import Any

import pandas as pd
import redis

from opslib.errors import OpslibError
from opslib.frames import discard_to_frame
from opslib.moves.archived import discard_from_archive
from opslib.moves.dead_moves import move_dead
from opslib.moves.locate import Progress, dead_ids_of
from opslib.moves.selection import of_kind

MAX_REASON_CHARS = 2000
NEEDS_WRITE = (
    "discard needs a user that may run scripts and write the queue's keys (EVALSHA of the discard script: "
    "XRANGE, XDEL, XADD); a read-only user can run discard(..., dry_run=True)"
)


#: What each action's missing reason asks for.
WHY = {
    "discard": "say why these jobs must never run, e.g. reason='orders refunded, INC-2211' "
    "(it is kept in the archive with who discarded them)",
    "pause": "say why the kind must wait, e.g. reason='seat map fix, INC-2214' (it is shown with the pause)",
    "resume": "say why, or leave reason out",
    "throttle": "say why, e.g. reason='provider asks for 10/s, INC-2215' (it is shown with the throttle)",
    "replay": "say why, or leave reason out",
}


def check_reason(reason: object, action: str = "discard") -> str:
    """``reason`` when it says why (non-empty text of at most :data:`MAX_REASON_CHARS` characters)."""
    if not isinstance(reason, str) or not reason.strip():
        raise OpslibError(f"{action} needs a reason, got {reason!r}: {WHY[action]}; nothing changed")
    if len(reason) > MAX_REASON_CHARS:
        raise OpslibError(f"reason is {len(reason)} characters; keep it under {MAX_REASON_CHARS}")
    return reason.strip()


def who(by: object) -> str:
    """``by``, or the operating-system user running this."""
    if by is not None:
        if not isinstance(by, str) or not by.strip():
            raise OpslibError(f"by must be a non-empty string (who discards), got {by!r}")
        return by.strip()
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"


def discard(
    ids: object,
    *,
    reason: str,
    by: str | None = None,
    dry_run: bool = False,
    client: redis.Redis | None = None,
    prefix: str | None = None,
    conn: Any = None,
    on_progress: Progress | None = None,
) -> pd.DataFrame:
    """Take dead letters out for good, recording who and why (columns in the module docstring).

    ``ids`` is one dead id, a list of them, or a ``dead_letters()`` frame (its
    index; its ``partition`` column says where each entry is; a bare id found
    in two partitions is refused). ``dry_run`` lists exactly what would be
    taken and writes nothing.
    """
    why = check_reason(reason)
    by_whom = who(by)
    return move_dead(
        dead_ids_of(ids),
        verb="discard",
        needs=NEEDS_WRITE,
        take=lambda scripts, dead_id, batch, at, record, pipe, _context: scripts.discard(
            dead_id, batch, by=by_whom, reason=why, at=at, record=record, client=pipe
        ),
        take_archived=lambda pg, redis_client, keys, dead_ids, batch, at, _context: dict.fromkeys(
            discard_from_archive(pg, redis_client, keys, dead_ids, batch, by=by_whom, reason=why, at=at), True
        ),
        to_frame=discard_to_frame,
        dry_run=dry_run,
        client=client,
        prefix=prefix,
        conn=conn,
        on_progress=on_progress,
        audit=(by_whom, why, ids),
    )


def discard_kind(
    kind: str,
    *,
    reason: str,
    signature: str | None = None,
    error_contains: str | None = None,
    since: object = None,
    by: str | None = None,
    dry_run: bool = False,
    client: redis.Redis | None = None,
    prefix: str | None = None,
    conn: Any = None,
    on_progress: Progress | None = None,
) -> pd.DataFrame:
    """Discard every dead letter of ``kind`` that matches the filters (as ``replay_kind`` selects them).

    Run it with ``dry_run=True`` first: it returns the same rows with status
    ``would discard`` and writes nothing.
    """
    check_reason(reason)
    who(by)
    targets = of_kind(
        kind, signature=signature, error_contains=error_contains, since=since, client=client, prefix=prefix, conn=conn
    )
    return discard(
        targets,
        reason=reason,
        by=by,
        dry_run=dry_run,
        client=client,
        prefix=prefix,
        conn=conn,
        on_progress=on_progress,
    )
