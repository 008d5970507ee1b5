"""``<ns>_jobs_awaiting_worker{queue, kind, version}``: how many jobs wait for a worker that runs them.

A job handed back because no live worker of its named queue runs its kind or
payload version waits in the queue's ``delayed`` (docs/worker.md, "Changing a
kind's payload safely"); ``<ns>_jobs_handed_back_total`` counts the hand-backs,
this counts the jobs, read by the metrics-lock holder with the other queue-wide
gauges: per partition one bounded read of what is due within the hand-back's
wait, counted by :mod:`worker.store.awaiting` (as health and ``opslib.kinds()``
count them). ``<ns>_jobs_awaiting_worker_capped{queue}`` is 1 when a read of
one of the queue's partitions reached :data:`~worker.store.awaiting.AWAITING_CAP` members: the
counts are then "at least".

The label values stay bounded whatever a producer writes: ``queue`` is a queue
the workers recorded, ``kind`` a kind the holder declares or one a worker
declared since it started (its :class:`~worker.loop.handback.Fleet`), else
``other`` (a kind no worker declares: a typo, or a new kind before its first
worker is up), and at most :data:`AWAITING_SERIES` (queue, kind, version) series
are exported, the largest; the rest are added up under ``kind="other",
version="other"``. When the jobs are gone their series are too (the next
reading has none).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from worker.store.awaiting import Awaiting, count_awaiting, read_due_soon
from worker.store.keys import Keys

#: The most (queue, kind, version) series exported; the smaller counts past it go under ``other``.
AWAITING_SERIES = 50
OTHER = "other"


async def read_awaiting_async(client: Any, parts: Sequence[Keys], now: float) -> Awaiting:
    """The waiting jobs of ``parts`` (every named queue's partitions) through a ``redis.asyncio`` client (single
    node or cluster), in one pipelined round trip; ``now``: Redis's time, epoch seconds."""
    pipe = client.pipeline(transaction=False)
    for keys in parts:
        read_due_soon(pipe, keys.delayed, now)
    due = await pipe.execute() if parts else []
    return count_awaiting(due, [keys.queue for keys in parts])


def bounded_labels(found: Awaiting, declared: Collection[str]) -> Counter[tuple[str, str, str]]:
    """``found``'s counts as label values: an undeclared kind as ``other``; past :data:`AWAITING_SERIES`
    series, the smallest added up under ``(queue, other, other)``."""
    named: Counter[tuple[str, str, str]] = Counter()
    for (queue, kind, version), n in found.counts.items():
        named[(queue, kind if kind in declared else OTHER, version)] += n
    kept: Counter[tuple[str, str, str]] = Counter(dict(named.most_common(AWAITING_SERIES)))
    for (queue, _kind, _version), n in named.items() - kept.items():
        kept[(queue, OTHER, OTHER)] += n
    return kept


class AwaitingCollector(Collector):
    """Exports the last reading (``reading``; None: not the lock holder, or not read) of the waiting jobs."""

    def __init__(self, namespace: str, declared: Collection[str]) -> None:
        self.namespace = namespace
        self.declared = frozenset(declared)
        self.fleet: Callable[[], Iterable[str]] = tuple
        """The kinds the other workers declared (:meth:`worker.observability.metrics.Metrics.watch_fleet`)."""
        self.reading: Awaiting | None = None

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        found = self.reading
        if found is None:
            return
        awaiting = GaugeMetricFamily(
            f"{self.namespace}_jobs_awaiting_worker",
            "Jobs handed back to wait in delayed because no live worker of their named queue runs their kind or "
            "payload version (kind: one a worker declares, else other); at least, when _capped is 1.",
            labels=["queue", "kind", "version"],
        )
        for labels, n in sorted(bounded_labels(found, self.declared | frozenset(self.fleet())).items()):
            awaiting.add_metric(list(labels), n)
        capped = GaugeMetricFamily(
            f"{self.namespace}_jobs_awaiting_worker_capped",
            "1 when a partition's read of delayed reached its cap: jobs_awaiting_worker is then a lower bound.",
            labels=["queue"],
        )
        for queue in sorted(found.queues):
            capped.add_metric([queue], 1.0 if queue in found.capped else 0.0)
        yield awaiting
        yield capped
