"""Discard dead letters that must never run (a refunded or duplicate order), with a reason on record.

Each entry leaves ``jobs:dead`` by the discard script (``worker/lua/discard.lua``:
XDEL + a ``discarded`` record in ``jobs:dead:log`` carrying the entry, who and
why, in one step); the archiver marks its row ``discarded`` with
``discarded_at``, ``discarded_by``, ``discard_reason`` and ``discard_batch``.
An id that ``jobs:dead`` no longer holds but the archive holds as ``dead``
is discarded there (:mod:`opslib.archived`). A replay and a discard racing
on the same entries leave each in exactly one of the two states.

``discard(ids, *, reason, by=None, dry_run=False, conn=None)``, and
``discard_kind(kind, *, reason, signature=None, error_contains=None, since=None, by=None, dry_run=False, conn=None)``
    One row per dead id: dead_id, status (str: discarded / missing / would
    discard), batch (str, the same on every row, ``""`` in a dry run, which
    writes nothing). Index 0..n-1; the batch is also in
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

from opslib.archived import discard_from_archive, open_archive, still_dead
from opslib.connection import redis_session
from opslib.errors import OpslibError
from opslib.frames import discard_to_frame
from opslib.replay import Progress, dead_ids_of, dead_ids_of_kind, exists, new_batch_id, pipelined
from worker.failures import now_iso
from worker.scripts import Scripts

MAX_REASON_CHARS = 2000
NEEDS_WRITE = (
    "discard needs a user that may run scripts and write the queue's keys (EVALSHA of the discard script: "
    "XRANGE, XDEL, XADD); a read-only user can run discard(..., dry_run=True)"
)


def check_reason(reason: object) -> str:
    """``reason`` when it says why (non-empty text of at most :data:`MAX_REASON_CHARS` characters)."""
    if not isinstance(reason, str) or not reason.strip():
        raise OpslibError(
            f"discard needs a reason, got {reason!r}: say why these jobs must never run, "
            "e.g. reason='orders refunded, INC-2211' (it is kept in the archive with who discarded them)"
        )
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
    index). ``dry_run`` lists exactly what would be taken and writes nothing.
    """
    why = check_reason(reason)
    by_whom = who(by)
    dead_ids = dead_ids_of(ids)
    action = "look up dead letters" if dry_run else "discard dead letters"
    with (
        redis_session(client, prefix, action, needs="" if dry_run else NEEDS_WRITE) as (redis_client, keys),
        open_archive(conn) as archive,
    ):
        in_stream = exists(redis_client, keys, dead_ids)
        gone = [dead_id for dead_id, hit in zip(dead_ids, in_stream, strict=True) if not hit]
        pg = archive.connection() if archive.enabled and gone else None  # before anything changes
        if dry_run:
            held = still_dead(pg, redis_client, keys, gone) if pg is not None else set()
            found = [hit or dead_id in held for dead_id, hit in zip(dead_ids, in_stream, strict=True)]
            return discard_to_frame(dead_ids, found, "", dry_run=True)
        batch, at = new_batch_id(), now_iso()
        scripts = Scripts(redis_client, keys)
        taken = pipelined(
            redis_client,
            dead_ids,
            lambda pipe, dead_id: scripts.discard(
                dead_id, batch, by=by_whom, reason=why, at=at, record=archive.enabled, client=pipe
            ),
            "discard",
            on_progress,
        )
        missed = [dead_id for dead_id, done in zip(dead_ids, taken, strict=True) if not done]
        if missed and archive.enabled:
            pg = pg if pg is not None else archive.connection()
            if pg is not None:
                marked = discard_from_archive(pg, redis_client, keys, missed, batch, by=by_whom, reason=why, at=at)
                taken = [done or dead_id in marked for dead_id, done in zip(dead_ids, taken, strict=True)]
        return discard_to_frame(dead_ids, [bool(done) for done in taken], batch, dry_run=False)


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
    dead_ids = dead_ids_of_kind(
        kind,
        signature=signature,
        error_contains=error_contains,
        since=since,
        client=client,
        prefix=prefix,
        conn=conn,
    )
    return discard(
        dead_ids,
        reason=reason,
        by=by,
        dry_run=dry_run,
        client=client,
        prefix=prefix,
        conn=conn,
        on_progress=on_progress,
    )
