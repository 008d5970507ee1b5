"""A move out of ``jobs:dead``: what replay and discard share, so each states only what differs.

Both look each id up in its partition's ``jobs:dead`` (or the archive, for ids
the stream was trimmed of: :mod:`opslib.moves.locate`), return the plan in a dry run,
take the streamed entries with a script per entry (pipelined), take the rest
from the archive under the log lock, and report one row per id. A replay's
script returns the new entry id, a discard's a truthy mark; a falsy result is
an entry someone else took first (``missing``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import pandas as pd

from opslib.actions import kind_of, record_action
from opslib.connection import partitions, redis_session
from opslib.moves.archived import open_archive
from opslib.moves.batches import new_batch_id, partition_scripts
from opslib.moves.locate import Located, Progress, Target, locate, pipelined
from worker.store.failures import now_iso
from worker.store.keys import Keys
from worker.store.scripts import Scripts
from worker.store.trace_context import sending

TakeFromStream = Callable[[Scripts, str, str, str, bool, Any, Mapping[str, str]], Any]
"""(partition's scripts, dead id, batch, at, record in the archive, pipeline, trace context) -> the script's
result. The trace context is {} unless the move is traced and a span is active."""
TakeFromArchive = Callable[[Any, Any, Keys, list[str], str, str, Mapping[str, str]], Mapping[str, Any]]
"""(archive connection, Redis client, partition's keys, dead ids, batch, at, trace context) -> dead id -> result,
for those taken."""
ToFrame = Callable[..., pd.DataFrame]
"""(dead ids, results, batch, dry_run=, partitions=) -> the caller's frame."""


def move_dead(
    targets: list[Target],
    *,
    verb: str,
    needs: str,
    take: TakeFromStream,
    take_archived: TakeFromArchive,
    to_frame: ToFrame,
    dry_run: bool,
    client: Any,
    prefix: str | None,
    conn: Any,
    on_progress: Progress | None,
    audit: tuple[str, str | None, object],
    traced: bool = False,
) -> pd.DataFrame:
    """Move ``targets`` out of ``jobs:dead`` (``verb``: ``"replay"`` or ``"discard"``) and return
    ``to_frame`` of each id's result; ``dry_run`` writes nothing and needs no write rights.
    ``audit`` is (by, reason, the ids as asked) for the action's record (:mod:`opslib.actions`).

    ``traced`` (replay): inside an active span, the moves run under a ``replay <queue>`` span
    linked to each entry's last attempt (:func:`worker.store.trace_context.sending`), whose
    context ``take`` and ``take_archived`` write into the jobs."""
    action = "look up dead letters" if dry_run else f"{verb} dead letters"
    with (
        redis_session(client, prefix, action, needs="" if dry_run else needs) as (redis_client, keys),
        open_archive(conn) as archive,
    ):
        parts = partitions(redis_client, keys)
        found = locate(redis_client, parts, targets, archive)
        if dry_run:
            return to_frame(found.dead_ids, found.found(), "", dry_run=True, partitions=found.where)
        batch, at = new_batch_id(), now_iso()
        links = [found.links[n] for n in found.streamed()]
        tracing: AbstractContextManager[dict[str, str]] = (
            sending(keys.jobs, len(links), verb, links) if traced else nullcontext({})
        )
        with tracing as context:
            moves = (batch, at, context)
            results = _take_all(found, redis_client, parts, archive, (take, take_archived), moves, verb, on_progress)
        by, reason, ids = audit
        moved = sum(1 for result in results if result)
        kind = kind_of(ids, found.kinds)
        record_action(redis_client, keys, verb, by=by, kind=kind, entries=moved, reason=reason, batch=batch)
        return to_frame(found.dead_ids, results, batch, dry_run=False, partitions=found.where)


def _take_all(
    found: Located,
    client: Any,
    parts: list[Keys],
    archive: Any,
    takers: tuple[TakeFromStream, TakeFromArchive],
    move: tuple[str, str, Mapping[str, str]],
    verb: str,
    on_progress: Progress | None,
) -> list[Any]:
    """Take each found entry: from its ``jobs:dead`` by script (pipelined), the rest from the archive
    under the log lock. ``move`` is (batch, at, trace context). The results in the targets' order
    (None: not taken)."""
    take, take_archived = takers
    batch, at, context = move
    scripts = partition_scripts(client, parts)
    streamed = found.streamed()
    results = pipelined(
        client,
        streamed,
        lambda pipe, n: take(scripts[found.where[n]], found.dead_ids[n], batch, at, archive.enabled, pipe, context),
        verb,
        on_progress,
    )
    done: dict[int, Any] = {n: result for n, result in zip(streamed, results, strict=True) if result}
    missed = found.from_archive(done)
    pg = archive.connection() if missed and archive.enabled else None
    for p, numbers in missed.items() if pg is not None else ():
        taken = take_archived(pg, client, parts[p], [found.dead_ids[n] for n in numbers], batch, at, context)
        for n in numbers:
            if found.dead_ids[n] in taken:
                done[n] = taken[found.dead_ids[n]]
                found.where[n] = p  # the archive held it
    return [done.get(n) for n in range(len(found.dead_ids))]
