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
    every row, ``""`` in a dry run, which writes nothing). Index 0..n-1; the
    batch is also in ``frame.attrs["batch"]``.

``replay_status(batch, *, wait_s=None)``
    One row per replayed dead id: dead_id, status (succeeded / failed again /
    retrying / still queued), where (jobs:dead / delayed / jobs / running /
    ``""``), attempts (int64: failed attempts since the replay), error (str:
    the latest), new_dead_id (str: the entry it became in ``jobs:dead``),
    updated_at (datetime64[ns, UTC], NaT until the worker recorded an
    outcome), batch (str). The worker keeps outcomes for 24 hours.

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
from opslib.connection import redis_session
from opslib.errors import OpslibError
from opslib.frames import parse_outcome, replay_status_to_frame, replay_to_frame
from opslib.queries import dead_letters, entry_floor
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


def dead_ids_of(ids: object) -> list[str]:
    """The dead ids in ``ids``: one id, a list, an Index, a Series, a ``dead_letters()`` or replay frame."""
    if isinstance(ids, str | bytes):
        values: Iterable[object] = [ids]
    elif isinstance(ids, pd.DataFrame):
        values = ids["dead_id"] if "dead_id" in ids.columns else ids.index
    elif isinstance(ids, Iterable):
        values = ids
    else:
        raise OpslibError(f"ids must be dead entry ids (a list, or a dead_letters() frame), got {type(ids).__name__}")
    return list(dict.fromkeys(check_entry_id(value) for value in values))


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
    (its index). ``on_progress(done, total)`` is called after each chunk.
    """
    dead_ids = dead_ids_of(ids)
    action = "look up dead letters" if dry_run else "replay dead letters"
    with redis_session(client, prefix, action, needs="" if dry_run else NEEDS_WRITE) as (redis_client, keys):
        if dry_run:
            return replay_to_frame(dead_ids, _exists(redis_client, keys, dead_ids), "", dry_run=True)
        batch = new_batch_id()
        return replay_to_frame(dead_ids, _move(redis_client, keys, dead_ids, batch, on_progress), batch, dry_run=False)


def _exists(client: Any, keys: Keys, dead_ids: list[str]) -> list[bool]:
    found: list[bool] = []
    for start in range(0, len(dead_ids), CHUNK):
        pipe = client.pipeline(transaction=False)
        for dead_id in dead_ids[start : start + CHUNK]:
            pipe.xrange(keys.dead, min=dead_id, max=dead_id)
        found += [bool(hit) for hit in pipe.execute()]
    return found


def _move(client: Any, keys: Keys, dead_ids: list[str], batch: str, on_progress: Progress | None) -> list:
    scripts = Scripts(client, keys)
    new_ids: list = []
    with tqdm(total=len(dead_ids), desc="replay", unit="entry", disable=len(dead_ids) < PROGRESS_FROM) as bar:
        for start in range(0, len(dead_ids), CHUNK):
            chunk = dead_ids[start : start + CHUNK]
            pipe = client.pipeline(transaction=False)
            for dead_id in chunk:
                scripts.replay(dead_id, batch, DEAD_FIELDS, client=pipe)
            new_ids += pipe.execute()
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
    return replay(dead.index, dry_run=dry_run, client=client, prefix=prefix, on_progress=on_progress)


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
            frame = _status(redis_client, keys, batch)
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


def _status(client: Any, keys: Keys, batch: str) -> pd.DataFrame:
    outcomes = client.hgetall(keys.replay(batch))
    if not outcomes:
        raise OpslibError(
            f"no replay batch {batch!r} in Redis: no replay used that id, or it is older than 24 hours "
            "(outcomes are kept that long); use the batch column of replay() or replay_kind()"
        )
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
    return replay_status_to_frame(batch, outcomes, dead_again, where, waiting)
