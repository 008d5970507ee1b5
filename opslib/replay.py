"""Replay dead letters after a fix, and follow what became of them.

A replay moves each entry with the replay script (``worker/lua/replay.lua``,
one atomic XRANGE + XADD ``jobs`` + XDEL ``jobs:dead`` + HSET
``replay:<batch>``): the job goes back with its original fields, attempts 0,
the error fields (``worker.wire.DEAD_FIELDS``) dropped, ``replay_of`` = the
dead id and ``replay_batch`` = the batch id. Two people replaying the same
entries at once re-add each once; an entry no longer there is reported as
``missing``, not an error. The calls are pipelined, 500 at a time.

``replay(ids, *, dry_run=False)``, and
``replay_kind(kind, *, signature=None, error_contains=None, since=None, dry_run=False)``
    One row per dead id: dead_id, new_id (str, ``""`` unless replayed),
    status (str: replayed / missing / would replay), batch (str, the same on
    every row, ``""`` in a dry run, which writes nothing), partition (int64:
    the queue partition holding the entry, -1 when found in none). Index
    0..n-1; the batch is also in ``frame.attrs["batch"]``.

``replay_status(batch, *, wait_s=None)``
    One row per replayed dead id: dead_id, status (succeeded / failed again /
    retrying / still queued), where (jobs:dead / delayed / jobs / running /
    ``""``), attempts (int64: failed attempts since the replay), error (str:
    the latest), new_dead_id (str: the entry it became in ``jobs:dead``),
    updated_at (datetime64[ns, UTC], NaT until the worker recorded an
    outcome), batch (str), partition (int64). The worker keeps outcomes for 24 hours.

Example::

    >>> plan = replay_kind("render_tickets", signature=sig, dry_run=True)   # writes nothing
    >>> done = replay_kind("render_tickets", signature=sig)
    >>> replay_status(done.attrs["batch"], wait_s=60).status.value_counts()
    succeeded    40
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import pandas as pd
import redis
from tqdm.auto import tqdm

from opslib.checks import check_batch, check_entry_id, parse_since
from opslib.connection import partitions, redis_session
from opslib.errors import OpslibError
from opslib.frames import combine, entry_order, parse_outcome, replay_status_to_frame, replay_to_frame
from opslib.queries import dead_letters, entry_floor
from worker.connection import is_cluster
from worker.keys import GROUP, Keys
from worker.scripts import Scripts
from worker.vocabulary import FINAL_STATUSES, RECORDED_QUEUED, WHERE_JOBS, WHERE_RUNNING
from worker.wire import DEAD_FIELDS, decode_member, text

CHUNK = 500
PROGRESS_FROM = 1000
"""A progress bar is shown for replays of at least this many entries."""
NEEDS_WRITE = (
    "replay needs a user that may run scripts and write the queue's keys (EVALSHA of the replay script: "
    "XRANGE, XADD, XDEL, HSET, EXPIRE); a read-only user can run replay(..., dry_run=True) and every query"
)
BATCH_TIME = "%Y%m%dT%H%M%SZ"

Progress = Callable[[int, int], None]


def new_batch_id() -> str:
    """A batch id that sorts by time and says when it was made: ``20261130T211400Z-3f9a1c2e``."""
    return f"{datetime.now(UTC):{BATCH_TIME}}-{secrets.token_hex(4)}"


def dead_ids_of(ids: object) -> list[tuple[str, int | None]]:
    """The dead ids in ``ids`` (one id, a list, an Index, a Series, a ``dead_letters()`` or replay
    frame), each with its partition when a frame's ``partition`` column gives it, once each."""
    partitions_given: Iterable[object] | None = None
    if isinstance(ids, str | bytes):
        values: Iterable[object] = [ids]
    elif isinstance(ids, pd.DataFrame):
        values = ids["dead_id"] if "dead_id" in ids.columns else ids.index
        if "partition" in ids.columns:
            partitions_given = ids["partition"]
    elif isinstance(ids, Iterable):
        values = ids
    else:
        raise OpslibError(f"ids must be dead entry ids (a list, or a dead_letters() frame), got {type(ids).__name__}")
    checked = [check_entry_id(value) for value in values]
    where = [None] * len(checked) if partitions_given is None else [int(str(p)) for p in partitions_given]
    return list(dict.fromkeys(zip(checked, where, strict=True)))


def replay(
    ids: object,
    *,
    dry_run: bool = False,
    client: redis.Redis | None = None,
    prefix: str | None = None,
    on_progress: Progress | None = None,
) -> pd.DataFrame:
    """Put dead letters back on ``jobs`` (columns in the module docstring); ``dry_run`` writes nothing.

    ``ids`` is one dead id, a list of them, or a ``dead_letters()`` frame
    (its index; its ``partition`` column says where each entry is). A bare id
    is looked for in every partition; one found in two partitions is refused
    (pass the ``dead_letters()`` rows instead). ``on_progress(done, total)``
    is called after each chunk.
    """
    targets = dead_ids_of(ids)
    dead_ids = [dead_id for dead_id, _ in targets]
    action = "look up dead letters" if dry_run else "replay dead letters"
    with redis_session(client, prefix, action, needs="" if dry_run else NEEDS_WRITE) as (redis_client, keys):
        parts = partitions(redis_client, keys)
        where = _locate(redis_client, parts, targets, check=dry_run)
        if dry_run:
            return replay_to_frame(dead_ids, [p >= 0 for p in where], "", dry_run=True, partitions=where)
        batch = new_batch_id()
        moved = _move(redis_client, parts, dead_ids, where, batch, on_progress)
        return replay_to_frame(dead_ids, moved, batch, dry_run=False, partitions=where)


def _locate(client: Any, parts: list[Keys], targets: list[tuple[str, int | None]], check: bool) -> list[int]:
    """Each id's partition (-1: in none). An id's only candidate is taken as it is unless ``check``;
    the move itself reports an entry that is gone. Several candidates are looked up (pipelined)."""
    count = len(parts)
    dead_ids = [dead_id for dead_id, _ in targets]
    candidates = [[p] if p is not None and 0 <= p < count else list(range(count)) for _, p in targets]
    asks = [(n, p) for n, cands in enumerate(candidates) if check or len(cands) > 1 for p in cands]
    found: dict[int, list[int]] = {}
    for start in range(0, len(asks), CHUNK):
        chunk = asks[start : start + CHUNK]
        pipe = client.pipeline(transaction=False)
        for n, p in chunk:
            pipe.xrange(parts[p].dead, min=dead_ids[n], max=dead_ids[n])
        for (n, p), hit in zip(chunk, pipe.execute(), strict=True):
            if hit:
                found.setdefault(n, []).append(p)
    where = []
    for n, cands in enumerate(candidates):
        if not check and len(cands) == 1:
            where.append(cands[0])
            continue
        hits = found.get(n, [])
        if len(hits) > 1:
            raise OpslibError(
                f"dead id {dead_ids[n]} is in partitions {', '.join(map(str, hits))}; "
                "pass the dead_letters() rows (their partition column says which) instead of bare ids"
            )
        where.append(hits[0] if hits else -1)
    return where


def _move(
    client: Any, parts: list[Keys], dead_ids: list[str], where: list[int], batch: str, on_progress: Progress | None
) -> list:
    scripts = [Scripts(client, keys) for keys in parts]
    if is_cluster(client):
        scripts[0].load(client)
    new_ids: list = []
    with tqdm(total=len(dead_ids), desc="replay", unit="entry", disable=len(dead_ids) < PROGRESS_FROM) as bar:
        for start in range(0, len(dead_ids), CHUNK):
            chunk = list(zip(dead_ids[start : start + CHUNK], where[start : start + CHUNK], strict=True))
            pipe = client.pipeline(transaction=False)
            for dead_id, p in chunk:
                if p >= 0:
                    scripts[p].replay(dead_id, batch, DEAD_FIELDS, client=pipe)
            results = iter(pipe.execute())
            new_ids += [next(results) if p >= 0 else None for _dead_id, p in chunk]
            bar.update(len(chunk))
            if on_progress is not None:
                on_progress(len(new_ids), len(dead_ids))
    return new_ids


def replay_kind(
    kind: str,
    *,
    signature: str | None = None,
    error_contains: str | None = None,
    since: object = None,
    dry_run: bool = False,
    client: redis.Redis | None = None,
    prefix: str | None = None,
    on_progress: Progress | None = None,
) -> pd.DataFrame:
    """Replay every dead letter of ``kind`` that matches the filters (columns in the module docstring).

    ``signature`` keeps one failure group (``failure_groups().signature``),
    ``error_contains`` keeps errors containing that text (case-sensitive),
    ``since`` keeps entries dead at or after a time. Run it with
    ``dry_run=True`` first: it returns the same rows with status
    ``would replay`` and writes nothing.
    """
    if error_contains is not None and (not isinstance(error_contains, str) or not error_contains):
        raise OpslibError(f"error_contains must be a non-empty string, got {error_contains!r}")
    dead = dead_letters(kind, since=since, signature=signature, client=client, prefix=prefix)
    if error_contains is not None:
        dead = dead[dead["error"].str.contains(error_contains, regex=False)]
    return replay(dead, dry_run=dry_run, client=client, prefix=prefix, on_progress=on_progress)


def replay_status(
    batch: str,
    *,
    wait_s: float | None = None,
    client: redis.Redis | None = None,
    prefix: str | None = None,
) -> pd.DataFrame:
    """What became of each job of a replay batch (columns in the module docstring).

    With ``wait_s``, polls until every job succeeded or failed again, or
    ``wait_s`` seconds passed, and returns the last state.
    """
    check_batch(batch)
    deadline = time.monotonic() + (wait_s or 0.0)
    with redis_session(client, prefix, "read a replay's outcomes") as (redis_client, keys):
        while True:
            frame = _status_everywhere(redis_client, partitions(redis_client, keys), batch)
            if wait_s is None or frame["status"].isin(FINAL_STATUSES).all() or time.monotonic() >= deadline:
                return frame
            time.sleep(0.2)


def _batch_start(batch: str) -> str:
    """The lowest dead id a job of ``batch`` can have (the batch id starts with its time)."""
    try:
        made = datetime.strptime(batch.partition("-")[0], BATCH_TIME).replace(tzinfo=UTC)
    except ValueError:
        return "-"
    return entry_floor(parse_since(made))


def _status_everywhere(client: Any, parts: list[Keys], batch: str) -> pd.DataFrame:
    """The status frame of ``batch`` over every partition (each keeps the outcomes of its jobs)."""
    frames = [frame for frame in (_status(client, keys, batch) for keys in parts) if frame is not None]
    if not frames:
        raise OpslibError(
            f"no replay batch {batch!r} in Redis: no replay used that id, or it is older than 24 hours "
            "(outcomes are kept that long); use the batch column of replay() or replay_kind()"
        )
    frame = combine(frames)
    return frame.iloc[sorted(range(len(frame)), key=lambda n: entry_order(frame["dead_id"].iat[n]))].reset_index(
        drop=True
    )


def _status(client: Any, keys: Keys, batch: str) -> pd.DataFrame | None:
    outcomes = client.hgetall(keys.replay(batch))
    if not outcomes:
        return None
    marker = f'"replay_batch":"{batch}"'
    dead_again = [
        (entry_id, fields)
        for entry_id, fields in client.xrange(keys.dead, min=_batch_start(batch), max="+")
        if text(fields.get(b"replay_batch", fields.get("replay_batch", b""))) == batch
    ]
    waiting = [
        decode_member(member).get("replay_of", "")
        for member, _score in client.zscan_iter(keys.delayed, match=f"*{marker}*", count=1000)
    ]
    queued = {}
    for dead_id, value in outcomes.items():
        outcome = parse_outcome(value)
        if outcome.get("status") == RECORDED_QUEUED and outcome.get("new_id"):
            queued[text(dead_id)] = str(outcome["new_id"])
    pipe = client.pipeline(transaction=False)
    for new_id in queued.values():
        pipe.xrange(keys.jobs, min=new_id, max=new_id)
        pipe.xpending_range(keys.jobs, GROUP, min=new_id, max=new_id, count=1)
    replies = pipe.execute(raise_on_error=False) if queued else []
    where = {}
    for index, dead_id in enumerate(queued):
        found, running = replies[2 * index], replies[2 * index + 1]
        if isinstance(running, list) and running:
            where[dead_id] = WHERE_RUNNING
        elif isinstance(found, list) and found:
            where[dead_id] = WHERE_JOBS
    return replay_status_to_frame(batch, outcomes, dead_again, where, waiting, keys.partition)
