"""Where each dead id asked for is: in which partition's ``jobs:dead``, or only in the archive.

A replay or a discard takes an entry from its partition's ``jobs:dead`` with a
script, and an entry the stream was trimmed of from the archive
(:mod:`opslib.moves.archived`). Ids of different partitions may be equal (two
primaries, one millisecond), so a ``dead_letters()`` frame's ``partition``
column says where each is; a bare id is looked for in every partition, and
one found in two is refused rather than guessed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pandas as pd
from tqdm.auto import tqdm

from opslib.checks import check_entry_id
from opslib.errors import OpslibError
from opslib.moves.archived import Archive, dead_anywhere, still_dead
from worker.store.keys import Keys
from worker.store.trace_context import TRACE_LINK
from worker.store.wire import text

CHUNK = 500
PROGRESS_FROM = 1000
"""A progress bar is shown for moves of at least this many entries."""
NOWHERE = -1
"""The partition of an id found in no partition (the frames' ``partition`` column)."""

Progress = Callable[[int, int], None]
Target = tuple[str, int | None]
"""A dead id and its partition when the caller knows it."""
T = TypeVar("T")


def dead_ids_of(ids: object, parts: list[Keys] | None = None) -> list[Target]:
    """The dead ids in ``ids`` (one id, a list, an Index, a Series, a ``dead_letters()``, replay or
    discard frame), each with its partition when a frame's ``partition`` column gives it, once each.

    A partition is a position in ``parts`` (the session's partitions of every queue): a frame with a
    ``queue`` column (``dead_letters()``) names each entry's queue and partition in it, which ``parts``
    turns into that position; without one, the number is the position itself (``default``'s partitions
    come first, so a frame of before named queues means what it did)."""
    if isinstance(ids, pd.DataFrame) and "queue" in ids.columns and "partition" in ids.columns and parts:
        ids = _positions(ids, parts)
    given: Iterable[object] | None = None
    if isinstance(ids, str | bytes):
        values: Iterable[object] = [ids]
    elif isinstance(ids, pd.DataFrame):
        values = ids["dead_id"] if "dead_id" in ids.columns else ids.index
        if "partition" in ids.columns:
            given = ids["partition"]
    elif isinstance(ids, Iterable):
        values = ids
    else:
        raise OpslibError(f"ids must be dead entry ids (a list, or a dead_letters() frame), got {type(ids).__name__}")
    checked = [check_entry_id(value) for value in values]
    where: list[int | None] = [None] * len(checked)
    if given is not None:
        where = [p if p >= 0 else None for p in (int(str(p)) for p in given)]
    return list(dict.fromkeys(zip(checked, where, strict=True)))


def _positions(frame: pd.DataFrame, parts: list[Keys]) -> pd.DataFrame:
    """``frame`` with its ``partition`` column turned into positions in ``parts`` by (queue, partition)."""
    position = {(keys.queue, keys.partition): n for n, keys in enumerate(parts)}
    pairs = zip(frame["queue"], frame["partition"], strict=True)
    where = [position.get((str(queue), int(str(p))), NOWHERE) for queue, p in pairs]
    return frame.drop(columns=["queue"]).assign(partition=where)


@dataclass(frozen=True)
class Located:
    """The ids asked for, each one's partition (:data:`NOWHERE` when in none), and whether that
    partition's ``jobs:dead`` holds it (else only the archive does, as ``dead``). ``fallback``: the
    partition whose archive a move looks in, under the log lock, when the script finds the entry gone
    (its partition, or the only one it can be in; :data:`NOWHERE` for a bare id found in none of several).
    ``links``: each streamed entry's ``trace_link`` (its last attempt's span; "" for none), which a
    traced replay's span links to."""

    dead_ids: list[str]
    where: list[int]
    in_stream: list[bool]
    fallback: list[int]
    links: list[str]
    kinds: set[str] = field(default_factory=set)
    """The kinds of the entries found in ``jobs:dead`` (for the action's record)."""

    def found(self) -> list[bool]:
        return [p != NOWHERE for p in self.where]

    def streamed(self) -> list[int]:
        """The positions of the entries a script takes from ``jobs:dead``, in order."""
        return [n for n, hit in enumerate(self.in_stream) if hit]

    def from_archive(self, done: dict[int, Any]) -> dict[int, list[int]]:
        """The positions to look for in the archive (not ``done`` by a script), per partition."""
        grouped: dict[int, list[int]] = {}
        for n, p in enumerate(self.fallback):
            if p != NOWHERE and not done.get(n):
                grouped.setdefault(p, []).append(n)
        return grouped


def locate(client: Any, parts: list[Keys], targets: list[Target], archive: Archive) -> Located:
    """Where each target is now: ``jobs:dead`` of its partition (of each partition for a bare id),
    then, for those in no stream, the archive (when on). Reads only; an id found in two partitions
    is an :class:`OpslibError`."""
    count = len(parts)
    dead_ids = [dead_id for dead_id, _ in targets]
    candidates = [[p] if p is not None and p < count else list(range(count)) for _, p in targets]
    asks = [(n, p) for n, cands in enumerate(candidates) for p in cands]
    hits: dict[int, list[int]] = {}
    links = [""] * len(targets)
    kinds: set[str] = set()
    for start in range(0, len(asks), CHUNK):
        chunk = asks[start : start + CHUNK]
        pipe = client.pipeline(transaction=False)
        for n, p in chunk:
            pipe.xrange(parts[p].dead, min=dead_ids[n], max=dead_ids[n])
        for (n, p), hit in zip(chunk, pipe.execute(), strict=True):
            if hit:
                hits.setdefault(n, []).append(p)
                fields = hit[0][1]
                links[n] = text(fields.get(b"trace_link", fields.get(TRACE_LINK, b"")))
                kinds.add(text(hit[0][1].get(b"kind", hit[0][1].get("kind", b""))))
    gone = [n for n in range(len(targets)) if n not in hits]
    pg = archive.connection() if archive.enabled and gone else None  # before anything changes
    if pg is not None:
        held = dead_anywhere(pg, parts, [dead_ids[n] for n in gone])
        asked: dict[int, list[int]] = {}
        for n in gone:
            for p in held.get(dead_ids[n], []):
                if p in candidates[n]:
                    asked.setdefault(p, []).append(n)
        for p, numbers in asked.items():
            still = still_dead(pg, client, parts[p], [dead_ids[n] for n in numbers])
            for n in numbers:
                if dead_ids[n] in still:
                    hits.setdefault(n, []).append(p)
    where = []
    for n in range(len(targets)):
        found = hits.get(n, [])
        if len(found) > 1:
            raise OpslibError(
                f"dead id {dead_ids[n]} is in partitions {', '.join(map(str, found))}; "
                "pass the dead_letters() rows (their partition column says which) instead of bare ids"
            )
        where.append(found[0] if found else NOWHERE)
    streamed = set(range(len(targets))) - set(gone)
    in_stream = [n in streamed for n in range(len(targets))]
    fallback = [p if p != NOWHERE or len(cands) > 1 else cands[0] for p, cands in zip(where, candidates, strict=True)]
    return Located(dead_ids, where, in_stream, fallback, links, kinds)


def pipelined(
    client: Any, items: list[T], call: Callable[[Any, T], Any], desc: str, on_progress: Progress | None
) -> list[Any]:
    """``call(pipe, item)`` for each item, :data:`CHUNK` per round trip, with a progress bar for big runs."""
    results: list[Any] = []
    with tqdm(total=len(items), desc=desc, unit="entry", disable=len(items) < PROGRESS_FROM) as bar:
        for start in range(0, len(items), CHUNK):
            chunk = items[start : start + CHUNK]
            pipe = client.pipeline(transaction=False)
            for item in chunk:
                call(pipe, item)
            results += pipe.execute()
            bar.update(len(chunk))
            if on_progress is not None:
                on_progress(len(results), len(items))
    return results
