"""The backlog of each partition: the work waiting for a worker, what an autoscaler scales on.

``<ns>_backlog{queue, partition}`` = entries of ``jobs`` not yet delivered to the
group ``workers`` + delayed jobs whose run time has come + throttled jobs + jobs
with a fair key waiting for their turn (``fair:queue``). Parked
jobs (a paused kind's) are not counted: they wait for ``resume``, not for a
worker, and a scaler that counted them would keep replicas idle for the length
of a pause. ``<ns>_running{queue, partition}`` is the group's pending count:
entries delivered and not acknowledged (running, or a stopped worker's waiting
for reclaim), so that a scaler stops at zero only when both are zero.

Why not ``XINFO GROUPS`` lag (what KEDA's ``redis-streams`` scaler reads): it is
NULL once an entry after the group's last-delivered id was deleted (XDEL), and
after an XTRIM past that id it stays too high for good (entries-added minus
entries-read still counts the trimmed entries, redis#13957), so a drained queue
reads as busy and a busy one as NULL (0 to the scaler).

How the undelivered entries are counted: Redis has no cheap count of an id
range, so both sides of the last-delivered id are counted a page at a time in
the same round trips: the entries after it (undelivered) and those at or before
it (pending, or acknowledged and not yet trimmed). Whichever side ends first
gives the number exactly: its own count, or XLEN minus the other's. The trim
chore (every second) keeps the delivered side to the pending entries and about a
second of acknowledged ones, so a deep backlog costs a page or two; no command
reads more than :data:`BACKLOG_PAGE` entries. XLEN and the last-delivered id are
read before the pages, so a trim or a delivery meanwhile can make the count read
high by what moved, never low. Past :data:`BACKLOG_COUNT_LIMIT` entries on both
sides (a long-running job holding back the trim, and a deep backlog), the number
is Redis's lag kept between the two partial counts, and ``exact`` is False.

The counting is written once as steps (:func:`_count`, :func:`_rounds`) that name the
commands to send; :func:`read_backlog` and :func:`read_backlog_async` only run them.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from worker.store.keys import GROUP, Keys
from worker.store.queues import DEFAULT_QUEUE
from worker.store.wire import text

#: Entries one XRANGE or XREVRANGE of the count reads (well under a millisecond of Redis).
BACKLOG_PAGE = 500
#: Entries counted on each side of the last-delivered id before the count gives up being exact.
BACKLOG_COUNT_LIMIT = 20_000

#: A command for a pipeline (sync or async): called with it, queues one command.
Command = Callable[[Any], Any]


@dataclass(frozen=True)
class PartitionBacklog:
    """One partition's waiting work at one moment (see the module docstring)."""

    partition: int
    undelivered: int
    delayed_due: int
    throttled: int
    running: int
    exact: bool = True
    fair: int = 0
    """Jobs with a fair key waiting in ``fair:queue`` for their turn onto ``jobs``."""
    queue: str = DEFAULT_QUEUE
    """The named queue of the partition (the ``queue`` label)."""

    @property
    def backlog(self) -> int:
        """What waits for a worker: undelivered + due delayed + throttled + fair (parked work excluded)."""
        return self.undelivered + self.delayed_due + self.throttled + self.fair


def _reply(reply: Any, empty: Any) -> Any:
    """A pipeline reply, or ``empty`` where the stream or the group does not exist; other errors raise."""
    if isinstance(reply, Exception):
        if "NOGROUP" in str(reply) or "no such key" in str(reply):
            return empty
        raise reply
    return reply


def _pages(keys: Keys, after: str, upto: str) -> list[Command]:
    """One page of each side: the entries after ``after`` (XRANGE), those up to ``upto`` (XREVRANGE)."""
    return [
        lambda p: p.xrange(keys.jobs, min=after, max="+", count=BACKLOG_PAGE),
        lambda p: p.xrevrange(keys.jobs, max=upto, min="-", count=BACKLOG_PAGE),
    ]


def _count(keys: Keys, now: float) -> Generator[list[Command], list[Any], PartitionBacklog]:
    """The steps of one partition's count: each yields the commands of one round trip and receives
    their replies; returns the partition's backlog."""
    length, groups, due, throttled, fair = yield [
        lambda p: p.xlen(keys.jobs),
        lambda p: p.xinfo_groups(keys.jobs),
        lambda p: p.zcount(keys.delayed, "-inf", now),
        lambda p: p.zcard(keys.throttled),
        lambda p: p.zcard(keys.fair_queue),
    ]
    group = next((g for g in _reply(groups, ()) if text(g["name"]) == GROUP), None)
    running = int(group["pending"]) if group is not None else 0

    def found(undelivered: int, exact: bool = True) -> PartitionBacklog:
        return PartitionBacklog(
            keys.partition, undelivered, int(due), int(throttled), running, exact, int(fair), keys.queue
        )

    if group is None or not int(length):  # never read (every entry waits), or nothing on the stream
        return found(int(length))
    last = text(group["last-delivered-id"])
    after, upto = "(" + last, last  # the next page of each side: ids above ``after``, ids up to ``upto``
    ahead = behind = 0
    while ahead < BACKLOG_COUNT_LIMIT or behind < BACKLOG_COUNT_LIMIT:
        tail, head = yield _pages(keys, after, upto)
        ahead, behind = ahead + len(tail), behind + len(head)
        if len(tail) < BACKLOG_PAGE:
            return found(ahead)
        if len(head) < BACKLOG_PAGE:
            return found(max(0, int(length) - behind))
        after, upto = "(" + text(tail[-1][0]), "(" + text(head[-1][0])
    lag = group.get("lag")
    return found(min(max(int(lag if lag is not None else length), ahead), int(length) - behind), exact=False)


def _rounds(client: Any, parts: Sequence[Keys], now: float) -> Generator[Any, list[Any], list[PartitionBacklog]]:
    """Each partition's count, a round trip at a time: yields a pipeline to execute, receives its replies;
    returns the readings (the one plan behind the sync and the asyncio reader)."""
    found = []
    for keys in parts:
        steps, replies = _count(keys, now), None
        try:
            while True:
                commands = steps.send(replies)  # type: ignore[arg-type]
                pipe = client.pipeline(transaction=False)
                for command in commands:
                    command(pipe)
                replies = yield pipe
        except StopIteration as done:
            found.append(done.value)
    return found


def read_backlog(client: Any, parts: Sequence[Keys], now: float) -> list[PartitionBacklog]:
    """Each partition's backlog through a ``redis.Redis`` or ``RedisCluster``; ``now``: epoch seconds."""
    rounds, replies = _rounds(client, parts, now), None
    try:
        while True:
            replies = rounds.send(replies).execute(raise_on_error=False)  # type: ignore[arg-type]
    except StopIteration as done:
        return done.value


async def read_backlog_async(client: Any, parts: Sequence[Keys], now: float) -> list[PartitionBacklog]:
    """:func:`read_backlog` through a ``redis.asyncio`` client."""
    rounds, replies = _rounds(client, parts, now), None
    try:
        while True:
            replies = await rounds.send(replies).execute(raise_on_error=False)  # type: ignore[arg-type]
    except StopIteration as done:
        return done.value


class BacklogCollector(Collector):
    """Exports ``<ns>_backlog`` and ``<ns>_running`` of the last reading (``readings``), or nothing."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.readings: list[PartitionBacklog] | None = None

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        yield from backlog_families(self.namespace, self.readings)


def backlog_families(namespace: str, readings: list[PartitionBacklog] | None) -> Iterator[Metric]:
    """The two gauges of ``readings`` (none when there is no reading: never a stale or made-up 0), labelled
    with each partition's named queue (the queues in use: a bounded set) and number."""
    if readings is None:
        return
    backlog = GaugeMetricFamily(
        f"{namespace}_backlog",
        "Jobs waiting for a worker: undelivered entries + due delayed jobs + throttled jobs + fair-key jobs "
        "waiting for their turn (paused kinds' parked jobs excluded); exact also where XINFO GROUPS lag is NULL.",
        labels=["queue", "partition"],
    )
    running = GaugeMetricFamily(
        f"{namespace}_running",
        "Entries delivered and not acknowledged: running, or a stopped worker's waiting for reclaim.",
        labels=["queue", "partition"],
    )
    for reading in readings:
        backlog.add_metric([reading.queue, str(reading.partition)], reading.backlog)
        running.add_metric([reading.queue, str(reading.partition)], reading.running)
    yield backlog
    yield running
