"""The queue's state at one moment: the one reader behind the metrics gauges and ``opslib.queue_stats``.

Both used to read Redis their own way and disagreed (live consumers by
heartbeat keys in one, by ``XINFO CONSUMERS`` in the other). Now the commands
are queued on a pipeline by :func:`queue_commands` and the replies turned into
a :class:`QueueState` by the pure :func:`state_of`; :func:`read_queue_state`
(a ``redis.Redis``, for opslib and the CLI) and :func:`read_queue_state_async`
(a ``redis.asyncio.Redis``, for the metrics chore) only do the I/O around them.

Two readings of "consumers", side by side:

* ``consumers``: the group's consumer list (``XINFO CONSUMERS``), each with
  its pending count, idle time and whether it is live. A consumer stays listed
  after its process died, until the forget-consumers chore removes it; and
  Redis 7.0 lists a consumer only once it was handed an entry, so a new idle
  worker may be missing there.
* ``consumers_live``: the workers whose heartbeat in the sorted set
  ``workers`` has not expired (:func:`worker.store.heartbeats.live_workers`,
  one command however many keys the server holds). The heartbeat chore moves
  its expiry ``HEARTBEAT_TTL_S`` ahead well before it passes: the one
  definition the metrics, opslib and ``python -m worker health`` share.

A queue that was never read (no ``jobs`` stream or no group ``workers``)
reads as zeros, with every entry of ``jobs`` counted as lag.
"""

from __future__ import annotations

import time
from dataclasses import Field, dataclass, field, fields
from datetime import datetime
from typing import Any

import redis.exceptions

from worker.observability.waiting import oldest_waiting_s, oldest_waiting_s_async
from worker.store.heartbeats import live_workers, live_workers_async
from worker.store.keys import GROUP, Keys
from worker.store.wire import json_object, text

#: ``pending_idle`` counts at most this many entries (XPENDING ... IDLE ... COUNT).
PENDING_IDLE_LIMIT = 1000
#: Where Redis cannot report the group's lag (6.2, or a deleted entry past the read
#: position), undelivered entries are counted by XRANGE, page by page, at most this many.
LAG_COUNT_LIMIT = 10_000
LAG_PAGE = 1000


@dataclass(frozen=True)
class Consumer:
    """One consumer of group ``workers``: its pending entries, idle time, and whether its heartbeat is fresh."""

    name: str
    pending: int
    idle_ms: int
    live: bool


def _stat(doc: str, *, metric: str | None = None, combine: str = "sum", counter: bool = False) -> Any:
    """A :class:`QueueState` field: what it holds (``doc``, also the metric's help), the metric that exports
    it (a name after the namespace, or None), how :func:`combined` joins partitions (``sum``, ``max``,
    ``queue``: the same for every partition, ``consumers``: one per worker), and whether it only grows."""
    return field(metadata={"doc": doc, "metric": metric, "combine": combine, "counter": counter})


@dataclass(frozen=True)
class QueueState:
    """The queue-wide numbers of one moment (see the module docstring for the two consumer counts).

    Each field declares what it holds, its metric and how partitions add up: the metrics
    (``worker.observability.metrics``), :func:`combined` and ``opslib.queue_stats`` read the
    declaration (:func:`stat_fields`) rather than list the names again.
    """

    stream_length: int = _stat("Entries on jobs, acknowledged ones included until the trim chore removes them.")
    lag: int = _stat("Entries on jobs not yet delivered to the group.", metric="queue_lag")
    oldest_waiting_s: float = _stat(
        "How long the oldest undelivered entry of jobs has waited (0 when none waits).",
        metric="queue_oldest_waiting_seconds",
        combine="max",
    )
    pending: int = _stat("Entries delivered to a worker and not yet acknowledged.", metric="queue_pending")
    pending_idle: int = _stat(
        f"Pending entries idle beyond RECLAIM_IDLE_MS (counted up to {PENDING_IDLE_LIMIT}).",
        metric="queue_pending_idle",
    )
    delayed: int = _stat("Jobs in the delayed set (retries and jobs for later).", metric="queue_delayed")
    delayed_due: int = _stat("Delayed jobs whose run time has come (promotion is due).", metric="queue_delayed_due")
    dead: int = _stat("Entries in the dead-letter stream jobs:dead.", metric="queue_dead_length")
    dead_evicted: int = _stat(
        "Dead entries evicted by the cap (the jobs:dead:evicted counter): DEAD_MAXLEN with the archive off, "
        "the hard ceiling DEAD_HARD_MAXLEN with it on.",
        metric="queue_dead_evicted",
        counter=True,
    )
    consumers: tuple[Consumer, ...] = _stat("The group's consumer list.", combine="consumers")
    consumers_live: int = _stat(
        "Workers with a fresh heartbeat (unexpired members of workers).", metric="queue_consumers_live", combine="queue"
    )
    paused_kinds: int = _stat("Kinds paused now (opslib.pause).", metric="queue_paused_kinds", combine="queue")
    oldest_pause_s: float = _stat(
        "How long the longest pause of a kind has lasted (0 when none is paused).",
        metric="queue_oldest_pause_seconds",
        combine="queue",
    )
    parked: int = _stat("Jobs of paused kinds waiting in parked for resume.", metric="queue_parked")
    throttled: int = _stat("Jobs a throttle deferred, waiting for their turn.", metric="queue_throttled")
    fair: int = _stat("Jobs with a fair key waiting in fair:queue for their key's turn.", metric="queue_fair")


def stat_fields() -> tuple[Field[Any], ...]:
    """The fields of :class:`QueueState`, in order, each with its declaration in ``metadata``."""
    return fields(QueueState)


def queue_commands(pipe: Any, keys: Keys, reclaim_idle_ms: int, now: float) -> None:
    """Queue the state's commands on a pipeline (sync or async); :func:`state_of` reads their replies."""
    pipe.xlen(keys.jobs)
    pipe.xinfo_groups(keys.jobs)
    pipe.xinfo_consumers(keys.jobs, GROUP)
    pipe.xpending_range(keys.jobs, GROUP, min="-", max="+", count=PENDING_IDLE_LIMIT, idle=reclaim_idle_ms)
    pipe.zcard(keys.delayed)
    pipe.zcount(keys.delayed, "-inf", now)
    pipe.xlen(keys.dead)
    pipe.get(keys.dead_evicted)
    pipe.hvals(keys.paused)
    pipe.zcard(keys.parked)
    pipe.zcard(keys.throttled)
    pipe.zcard(keys.fair_queue)


#: What each reply of :func:`queue_commands` stands for where the stream or the group does not exist yet.
ABSENT_REPLIES: tuple[Any, ...] = (0, (), (), (), 0, 0, 0, None, (), 0, 0, 0)


def oldest_pause_s(paused: Any, now: float) -> float:
    """How long the oldest of the pauses (``paused``' values: JSON with ``since``) has lasted, in seconds."""
    oldest = now
    for value in paused:
        try:
            since = datetime.fromisoformat(json_object(value)["since"]).timestamp()
        except (ValueError, KeyError, TypeError):
            continue
        oldest = min(oldest, since)
    return now - oldest


def _present(reply: Any, empty: Any) -> Any:
    """A pipeline reply, or ``empty`` where the stream or the group does not exist yet; other errors raise."""
    if isinstance(reply, redis.exceptions.ResponseError):
        message = str(reply)
        if "NOGROUP" in message or "no such key" in message:
            return empty
        raise reply
    if isinstance(reply, Exception):
        raise reply
    return reply


def group_of(replies: list[Any]) -> dict[Any, Any]:
    """Group ``workers`` as ``XINFO GROUPS`` describes it (``{}``: no such group or stream)."""
    groups = _present(replies[1], ABSENT_REPLIES[1])
    return next((g for g in groups if text(g["name"]) == GROUP), {})


def last_delivered(replies: list[Any]) -> str | None:
    """The group's last-delivered id (None: no group yet, so every entry is undelivered)."""
    group = group_of(replies)
    return text(group["last-delivered-id"]) if group else None


def lag_to_count(replies: list[Any]) -> str | None:
    """The group's last-delivered id when Redis cannot report its lag (count what follows it), else None."""
    group = group_of(replies)
    if not group or group.get("lag") is not None:
        return None
    return text(group["last-delivered-id"])


def state_of(
    replies: list[Any],
    live: set[str],
    undelivered: int | None = None,
    oldest_waiting_s: float = 0.0,
    now: float | None = None,
) -> QueueState:
    """The :class:`QueueState` of :func:`queue_commands`' replies, the live workers' names, the count of
    undelivered entries (needed only where :func:`lag_to_count` asked for one), the oldest one's wait
    and the moment of the reading (for the pauses' age)."""
    length, _groups, consumers, idle, delayed, due, dead, evicted, paused, parked, throttled, fair = (
        _present(reply, empty) for reply, empty in zip(replies, ABSENT_REPLIES, strict=True)
    )
    group = group_of(replies)
    if not group:
        lag = int(length)
    elif group.get("lag") is not None:
        lag = int(group["lag"])
    elif undelivered is not None:
        lag = undelivered
    else:
        raise ValueError("Redis did not report the group's lag: count the undelivered entries (lag_to_count)")
    listed = tuple(_consumer(info, live) for info in consumers)
    return QueueState(
        stream_length=int(length),
        lag=lag,
        pending=int(group.get("pending", 0)),
        pending_idle=len(idle),
        delayed=int(delayed),
        delayed_due=int(due),
        dead=int(dead),
        dead_evicted=int(evicted or 0),
        consumers=listed,
        consumers_live=len(live),
        oldest_waiting_s=oldest_waiting_s,
        paused_kinds=len(paused),
        oldest_pause_s=oldest_pause_s(paused, time.time() if now is None else now),
        parked=int(parked),
        throttled=int(throttled),
        fair=int(fair),
    )


def _consumer(info: dict[Any, Any], live: set[str]) -> Consumer:
    name = text(info["name"])
    return Consumer(name, int(info["pending"]), int(info["idle"]), name in live)


def count_undelivered(client: Any, keys: Keys, last_delivered_id: str) -> int:
    """Entries of ``jobs`` after the group's last-delivered id, up to :data:`LAG_COUNT_LIMIT`; a ``redis.Redis``."""
    count, low = 0, "(" + last_delivered_id
    while count < LAG_COUNT_LIMIT:
        page = client.xrange(keys.jobs, min=low, max="+", count=LAG_PAGE) or []
        count += len(page)
        if len(page) < LAG_PAGE:
            break
        low = "(" + text(page[-1][0])
    return min(count, LAG_COUNT_LIMIT)


async def count_undelivered_async(client: Any, keys: Keys, last_delivered_id: str) -> int:
    """:func:`count_undelivered` for a ``redis.asyncio.Redis``."""
    count, low = 0, "(" + last_delivered_id
    while count < LAG_COUNT_LIMIT:
        page = await client.xrange(keys.jobs, min=low, max="+", count=LAG_PAGE) or []
        count += len(page)
        if len(page) < LAG_PAGE:
            break
        low = "(" + text(page[-1][0])
    return min(count, LAG_COUNT_LIMIT)


def read_queue_state(client: Any, keys: Keys, *, reclaim_idle_ms: int, now: float | None = None) -> QueueState:
    """The queue's state through a ``redis.Redis``: one pipelined round trip, then the live workers."""
    pipe = client.pipeline(transaction=False)
    queue_commands(pipe, keys, reclaim_idle_ms, time.time() if now is None else now)
    replies = pipe.execute(raise_on_error=False)
    last_id = lag_to_count(replies)
    undelivered = None if last_id is None else count_undelivered(client, keys, last_id)
    waited = oldest_waiting_s(client, keys.jobs, last_delivered(replies), time.time() if now is None else now)
    return state_of(replies, live_workers(client, keys), undelivered, waited, now)


async def read_queue_state_async(
    client: Any, keys: Keys, *, reclaim_idle_ms: int, now: float | None = None
) -> QueueState:
    """:func:`read_queue_state` through a ``redis.asyncio.Redis``."""
    pipe = client.pipeline(transaction=False)
    queue_commands(pipe, keys, reclaim_idle_ms, time.time() if now is None else now)
    replies = await pipe.execute(raise_on_error=False)
    last_id = lag_to_count(replies)
    undelivered = None if last_id is None else await count_undelivered_async(client, keys, last_id)
    moment = time.time() if now is None else now
    waited = await oldest_waiting_s_async(client, keys.jobs, last_delivered(replies), moment)
    return state_of(replies, await live_workers_async(client, keys), undelivered, waited, now)


def combined(states: list[QueueState]) -> QueueState:
    """The state of a queue of several partitions: the counts added up, the oldest wait the longest,
    one consumer per worker (a worker consumes every partition: its pending entries added up, its
    idle time the shortest). Heartbeats are the queue's, not a partition's: counted once."""
    if len(states) == 1:
        return states[0]
    consumers: dict[str, Consumer] = {}
    for state in states:
        for c in state.consumers:
            seen = consumers.get(c.name)
            consumers[c.name] = (
                c
                if seen is None
                else Consumer(c.name, seen.pending + c.pending, min(seen.idle_ms, c.idle_ms), seen.live or c.live)
            )
    joined: dict[str, Any] = {}
    for stat in stat_fields():
        values = [getattr(state, stat.name) for state in states]
        how = stat.metadata["combine"]
        joined[stat.name] = (
            sum(values) if how == "sum" else max(values) if how == "max" else values[0] if how == "queue" else None
        )
    joined["consumers"] = tuple(consumers.values())
    return QueueState(**joined)


def read_partitions_state(client: Any, parts: list[Keys], *, reclaim_idle_ms: int) -> QueueState:
    """:func:`read_queue_state` of every partition, :func:`combined`."""
    now = time.time()
    return combined([read_queue_state(client, keys, reclaim_idle_ms=reclaim_idle_ms, now=now) for keys in parts])


async def read_partitions_state_async(client: Any, parts: list[Keys], *, reclaim_idle_ms: int) -> QueueState:
    """:func:`read_partitions_state` through a ``redis.asyncio`` client."""
    now = time.time()
    states = [await read_queue_state_async(client, keys, reclaim_idle_ms=reclaim_idle_ms, now=now) for keys in parts]
    return combined(states)
