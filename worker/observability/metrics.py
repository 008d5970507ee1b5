"""Prometheus metrics of a worker, served on ``METRICS_HOST:METRICS_PORT`` (0: off).

Two kinds of numbers, collected two ways:

* **This process's work** — job outcomes per kind, job durations, the last
  success of each kind, and the scheduler's ticks. :class:`Metrics` is the
  loop's :class:`~worker.observability.observer.Observer` (``job_finished``) and the
  scheduler's (``tick_enqueued`` / ``tick_skipped``). Every worker exports its
  own counts: add them up across replicas with ``sum``.
* **The queue's state** — each field of
  :class:`~worker.observability.queue_state.QueueState` that declares a
  metric (lag, pending, delayed, dead, parked, ...), summed over the partitions, read by
  :func:`worker.observability.queue_state.read_partitions_state_async` (the
  reader ``opslib.queue_stats`` uses too, so both show the same numbers).
  These are the same for every replica, so one worker at a time reads them
  from Redis: the holder of the ``metrics:lock`` key (a redis-py
  token lock held by the worker's name, renewed every ``METRICS_INTERVAL_S``
  and expiring after three intervals). Only the holder exports those series;
  the others export none, so there is no N-fold copy. Each series carries a
  ``queue`` label (the named queue), and after a hand-over (the holder died:
  a new one takes over within three intervals) the series comes from another
  ``instance``: aggregate with ``max by (queue)``, as ``deploy/alerts.yml``
  does. The holder also exports the backlog (:mod:`worker.observability.backlog`)
  and the jobs waiting for a worker (:mod:`worker.observability.awaiting_gauge`).
  A holder that cannot read Redis drops its numbers rather than export stale ones.

Every name starts with ``METRICS_NAMESPACE`` (``worker`` by default; an
application's deployment may set its own, e.g. ``myapp``). Each series, its
type, labels and meaning is in the metrics table of ``docs/operations.md``
("Metrics"), which ``tests/docs/test_catalogues.py`` checks against what this
registry exports, so a gauge declared on ``QueueState`` is one row in the
table and nothing here. The ``queue`` label is the named queue on the job
and queue series and ``QUEUE_PREFIX`` on the worker-wide ones (the archive's,
the scheduler's ticks, ...): the page lists the latter ("Who exports what"),
checked by the same test. Plus prometheus_client's ``process_*`` series (CPU,
memory, start time).
"""

from __future__ import annotations

import contextlib
import logging
import time
from bisect import bisect_left
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from itertools import accumulate
from typing import TYPE_CHECKING

import redis.asyncio as aioredis
import redis.exceptions
from prometheus_client import CollectorRegistry, Counter, Gauge, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from worker.app import Chore
from worker.archive.archiver import ArchiveCollector, Archiver, read_partitions_backlog
from worker.kinds import Registry
from worker.observability.awaiting_gauge import AwaitingCollector, read_awaiting_async
from worker.observability.backlog import BacklogCollector, read_backlog_async
from worker.observability.endpoint import MetricsEndpoint
from worker.observability.observer import Observer
from worker.observability.queue_state import QueueState, read_partitions_state_async, stat_fields
from worker.settings import Settings
from worker.store.keys import Keys
from worker.store.partitions import known_queues_async, partition_keys, queue_names
from worker.store.queues import DEFAULT_QUEUE
from worker.store.reconnect import unless_lost
from worker.store.server_clock import CLOCK
from worker.store.vocabulary import OUTCOME_DEAD, OUTCOME_RETRIED, OUTCOME_SUCCEEDED, REASONS, REASONS_AFTER_A_RUN

if TYPE_CHECKING:
    from worker.app import WorkerApp

log = logging.getLogger("worker.observability.metrics")

DURATION_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
#: A job's wait before it started: from a millisecond (an idle queue) to an hour (a backlog).
#: The ``kind`` label of every kind the worker does not declare (bounded label values).
OTHER_KIND = "other"
WAIT_BUCKETS_S = (0.005, 0.025, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600)


class QueueCollector(Collector):
    """Exports the last :class:`QueueState` of each named queue this worker read as the lock holder (label
    ``queue``: the queue's name), or nothing."""

    #: (metric name after the namespace, help, QueueState field, is a counter), from the fields' declaration.
    SERIES = tuple(
        (stat.metadata["metric"], stat.metadata["doc"], stat.name, stat.metadata["counter"])
        for stat in stat_fields()
        if stat.metadata["metric"]
    )

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.states: dict[str, QueueState] | None = None
        """Per named queue, its state summed over its partitions; None: not the holder (or not read)."""

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        states = self.states
        if states is None:
            return
        for name, help_text, attr, counter in self.SERIES:
            family = CounterMetricFamily if counter else GaugeMetricFamily
            metric = family(f"{self.namespace}_{name}", help_text, labels=["queue"])
            for queue, state in states.items():
                metric.add_metric([queue], getattr(state, attr))
            yield metric


def labelled_queues(settings: Settings, registry: Registry) -> list[str]:
    """The named queues the queue-state gauges report (a bounded set of label values): the ones this worker
    serves and the ones its kinds declare, ``default`` first."""
    names = {served.name for served in settings.queues} | {spec.queue for spec in registry.kinds.values()}
    return sorted(names, key=lambda name: (name != DEFAULT_QUEUE, name))


class CountAtScrape(Collector):
    """A counter with label ``queue`` whose value a function gives at each scrape."""

    def __init__(self, name: str, help_text: str, queue: str, count: Callable[[], int]) -> None:
        self.name, self.help_text, self.queue, self.count = name, help_text, queue, count

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        metric = CounterMetricFamily(self.name, self.help_text, labels=["queue"])
        metric.add_metric([self.queue], self.count())
        yield metric


class JobCollector(Collector, Observer):
    """This process's job outcomes per named queue and kind, kept as plain numbers and turned into metrics at
    scrape time (label ``queue``: the named queue the job came from, one of those the worker serves).

    :meth:`job_finished` runs on the loop's success path, up to 15,000 times a
    second: these dictionary updates cost about 1 µs a job, where prometheus_client's
    labelled Counter, Histogram and Gauge (each with a lock) cost about 4.7 µs. The
    loop is the only writer; a scrape (another thread) copies the numbers first.
    """

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.succeeded: dict[tuple[str, str], int] = {}
        """Per ``(queue, kind)``, as every dictionary here but ``dead`` (``(queue, kind, reason)``)."""
        self.retried: dict[tuple[str, str], int] = {}
        self.dead: dict[tuple[str, str, str], int] = {}
        self.buckets: dict[tuple[str, str], list[int]] = {}
        """Observations per bucket, not cumulative; the last one is +Inf."""
        self.duration_sum: dict[tuple[str, str], float] = {}
        self.last_success: dict[tuple[str, str], float] = {}
        self.waits: dict[tuple[str, str], list[int]] = {}
        """Jobs started per wait bucket, not cumulative; the last one is +Inf."""
        self.wait_sum: dict[tuple[str, str], float] = {}

    def job_started(self, kind: str, wait_s: float, queue: str = DEFAULT_QUEUE) -> None:
        """The loop's report of a job about to run (:class:`worker.observability.observer.Observer`): about 0.3 µs."""
        key = (queue, kind)
        waits = self.waits.get(key)
        if waits is None:
            waits = self.waits[key] = [0] * (len(WAIT_BUCKETS_S) + 1)
        waits[bisect_left(WAIT_BUCKETS_S, wait_s)] += 1
        self.wait_sum[key] = self.wait_sum.get(key, 0.0) + wait_s

    def job_finished(
        self, kind: str, outcome: str, duration_s: float, reason: str | None, queue: str = DEFAULT_QUEUE
    ) -> None:
        """The loop's report of one retried or dead job (:class:`worker.observability.observer.Observer`)."""
        if outcome == OUTCOME_SUCCEEDED:
            self.jobs_succeeded((kind,), (duration_s,), queue)
            return
        key = (queue, kind)
        if outcome == OUTCOME_DEAD:
            dead_key = (queue, kind, reason or "")
            self.dead[dead_key] = self.dead.get(dead_key, 0) + 1
            if reason not in REASONS_AFTER_A_RUN:
                return  # never ran: malformed, unknown kind, or poison found by reclaim
        buckets = self.buckets.get(key)
        if buckets is None:
            buckets = self.buckets[key] = [0] * (len(DURATION_BUCKETS_S) + 1)
        buckets[bisect_left(DURATION_BUCKETS_S, duration_s)] += 1
        self.duration_sum[key] = self.duration_sum.get(key, 0.0) + duration_s
        if outcome == OUTCOME_RETRIED:
            self.retried[key] = self.retried.get(key, 0) + 1

    def jobs_succeeded(self, kinds: Sequence[str], durations_s: Sequence[float], queue: str = DEFAULT_QUEUE) -> None:
        """The loop's report of the jobs that succeeded since its last read (:class:`worker.loop.observe.Successes`)."""
        now, all_buckets, duration_sum, succeeded = time.time(), self.buckets, self.duration_sum, self.succeeded
        for kind, duration_s in zip(kinds, durations_s, strict=True):
            key = (queue, kind)
            buckets = all_buckets.get(key)
            if buckets is None:
                buckets = all_buckets[key] = [0] * (len(DURATION_BUCKETS_S) + 1)
            buckets[bisect_left(DURATION_BUCKETS_S, duration_s)] += 1
            duration_sum[key] = duration_sum.get(key, 0.0) + duration_s
            succeeded[key] = succeeded.get(key, 0) + 1
            self.last_success[key] = now

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        ns = self.namespace
        succeeded = CounterMetricFamily(
            f"{ns}_jobs_succeeded", "Jobs whose handler returned.", labels=["queue", "kind"]
        )
        for key, n in list(self.succeeded.items()):
            succeeded.add_metric(list(key), n)
        retried = CounterMetricFamily(
            f"{ns}_jobs_retried", "Failed attempts put back in delayed for a retry.", labels=["queue", "kind"]
        )
        for key, n in list(self.retried.items()):
            retried.add_metric(list(key), n)
        dead = CounterMetricFamily(
            f"{ns}_jobs_dead",
            "Jobs dead-lettered by this worker, by reason (" + ", ".join(REASONS) + ").",
            labels=["queue", "kind", "reason"],
        )
        for dead_key, n in list(self.dead.items()):
            dead.add_metric(list(dead_key), n)
        duration = histogram(
            f"{ns}_job_duration_seconds",
            "Time a handler ran, whatever its outcome.",
            DURATION_BUCKETS_S,
            self.buckets,
            self.duration_sum,
        )
        wait = histogram(
            f"{ns}_job_wait_seconds",
            "Time a job waited on jobs before a worker started it (start time minus the entry id's time).",
            WAIT_BUCKETS_S,
            self.waits,
            self.wait_sum,
        )
        last_success = GaugeMetricFamily(
            f"{ns}_job_last_success_timestamp_seconds",
            "Unix time of the kind's last success in this process; for a scheduled kind, "
            "the process start until its first success.",
            labels=["queue", "kind"],
        )
        for key, at in list(self.last_success.items()):
            last_success.add_metric(list(key), at)
        yield from (succeeded, retried, dead, duration, wait, last_success)


def histogram(
    name: str,
    help_text: str,
    bounds_s: tuple[float, ...],
    per_kind: dict[tuple[str, str], list[int]],
    sums: dict[tuple[str, str], float],
) -> HistogramMetricFamily:
    """A histogram family (labels queue, kind) of per-bucket counts kept as plain lists (last bucket +Inf)."""
    family = HistogramMetricFamily(name, help_text, labels=["queue", "kind"])
    bounds = [*(f"{b:g}" for b in bounds_s), "+Inf"]
    for key, counts in list(per_kind.items()):
        cumulative = list(accumulate(counts))
        family.add_metric(list(key), list(zip(bounds, cumulative, strict=True)), sums.get(key, 0.0))
    return family


def handed_back_counter(ns: str, registry: CollectorRegistry) -> Counter:
    """``<ns>_jobs_handed_back_total{queue, kind, to}`` (:mod:`worker.loop.handback`); ``queue``: the named queue."""
    return Counter(
        f"{ns}_jobs_handed_back",
        "Jobs this worker could not run (a newer payload version, a kind it lacks) handed back within their "
        "named queue: to=worker for a live worker of the queue that runs them, to=wait into delayed while none does.",
        ["queue", "kind", "to"],
        registry=registry,
    )


class Metrics(Observer):
    """The metrics of one worker process, in a registry of its own."""

    def __init__(
        self, settings: Settings, client: aioredis.Redis, registry: Registry, archiver: Archiver | None = None
    ) -> None:
        self.settings = settings
        self.redis = client
        self.keys = Keys(settings.prefix)
        self.queue = settings.prefix
        self.declared = frozenset(registry.kinds)
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        ns = settings.metrics_namespace
        self.labelled_queues = labelled_queues(settings, registry)
        self.queue_collector = QueueCollector(ns)
        self.registry.register(self.queue_collector)
        self.backlog = BacklogCollector(ns)
        self.registry.register(self.backlog)
        self.awaiting = AwaitingCollector(ns, self.declared)
        self.registry.register(self.awaiting)
        self.jobs = JobCollector(ns)
        self.registry.register(self.jobs)
        self.archive: ArchiveCollector | None = None
        if archiver is not None:
            self.archive = ArchiveCollector(self.queue, ns, archiver)
            self.registry.register(self.archive)
        self.interval = Gauge(
            f"{ns}_schedule_interval_seconds",
            "Time between two ticks of a schedule.",
            ["queue", "schedule", "kind"],
            registry=self.registry,
        )
        self.ticks_enqueued = Counter(
            f"{ns}_scheduler_ticks_enqueued",
            "Scheduler ticks this worker enqueued (it won the tick's lock).",
            ["queue", "schedule"],
            registry=self.registry,
        )
        self.ticks_skipped = Counter(
            f"{ns}_scheduler_ticks_skipped",
            "Scheduler ticks this worker skipped because another worker held the tick's lock.",
            ["queue", "schedule"],
            registry=self.registry,
        )
        self.outcomes_waiting = Gauge(
            f"{ns}_outcomes_waiting",
            "Decided outcomes this worker keeps until Redis accepts their move (it refuses writes: OOM, MISCONF...).",
            ["queue"],
            registry=self.registry,
        )
        self.outcomes_waiting.labels(self.queue).set(0)
        self.handed_back = handed_back_counter(ns, self.registry)
        self.settles_stale = self._network_series(ns)
        self._watch_schedules(registry)
        self._lock = client.lock(
            self.keys.metrics_lock, timeout=3 * settings.metrics_interval_s, blocking=False, thread_local=False
        )
        self._holding = False
        self._server: MetricsEndpoint | None = None

    def _watch_schedules(self, registry: Registry) -> None:
        """Each schedule's interval, and its kind's last success set to now (until it runs), under the kind's
        named queue, as its jobs' series."""
        started = time.time()
        for schedule in registry.schedules.values():
            spec = registry.kinds.get(schedule.kind)
            queue = spec.queue if spec else DEFAULT_QUEUE
            self.interval.labels(queue, schedule.name, schedule.kind).set(
                schedule.interval_s(started, self.settings.schedule_tz)
            )
            self.jobs.last_success[(queue, schedule.kind)] = started

    # ------------------------------------------------------------ observers

    def job_started(self, kind: str, wait_s: float, queue: str = DEFAULT_QUEUE) -> None:
        """The loop's report of a job about to run (:class:`worker.observability.observer.Observer`)."""
        self.jobs.job_started(kind, wait_s, queue)

    def job_finished(
        self, kind: str, outcome: str, duration_s: float, reason: str | None, queue: str = DEFAULT_QUEUE
    ) -> None:
        """The loop's report of one finished job (:class:`worker.observability.observer.Observer`). A kind this worker
        does not declare (an unknown kind, a malformed entry's, poison's) counts under ``kind="other"``, so
        whoever writes to the stream cannot grow the label values without bound."""
        self.jobs.job_finished(kind if kind in self.declared else OTHER_KIND, outcome, duration_s, reason, queue)

    def jobs_succeeded(self, kinds: Sequence[str], durations_s: Sequence[float], queue: str = DEFAULT_QUEUE) -> None:
        """The loop's report of the jobs that succeeded since its last read. Only a declared kind's job
        runs, so no kind here needs ``kind="other"``."""
        self.jobs.jobs_succeeded(kinds, durations_s, queue)

    def job_handed_back(self, kind: str, waiting: bool, queue: str = DEFAULT_QUEUE) -> None:
        """A hand-back (:class:`worker.observability.observer.Observer`), under the entry's named queue (one this
        worker serves); an undeclared kind counts as ``other``."""
        self.handed_back.labels(
            queue, kind if kind in self.declared else OTHER_KIND, "wait" if waiting else "worker"
        ).inc()

    def watch_fleet(self, declared: Callable[[], Iterable[str]]) -> None:
        """Name in ``jobs_awaiting_worker``'s ``kind`` label the kinds ``declared()`` gives (those the workers
        declared since this one started: :class:`worker.loop.handback.Fleet`) besides this worker's own."""
        self.awaiting.fleet = declared

    def watch_outcomes(self, waiting: Callable[[], int]) -> None:
        """Read ``waiting()`` (the worker's :attr:`worker.loop.episode.Episode.waiting`) at each scrape."""
        self.outcomes_waiting.labels(self.queue).set_function(waiting)

    def _network_series(self, ns: str) -> CountAtScrape:
        """The clock's offset (a gauge read at each scrape) and the counter of stale settles, 0 until
        :meth:`watch_stale`."""
        clock_offset = Gauge(
            f"{ns}_clock_offset_seconds",
            "Redis's clock minus this worker's, as last measured (TIME at each heartbeat); past 2 s it is logged.",
            ["queue"],
            registry=self.registry,
        )
        clock_offset.labels(self.queue).set_function(lambda: CLOCK.offset_s)
        help_text = "Settles (ack, retry, dead letter) dropped because the entry was no longer this worker's."
        settles_stale = CountAtScrape(f"{ns}_settles_stale", help_text, self.queue, lambda: 0)
        self.registry.register(settles_stale)
        return settles_stale

    def watch_stale(self, stale: Callable[[], int]) -> None:
        """Report ``stale()`` (settles the fence dropped, :mod:`worker.loop.fence`) at each scrape."""
        self.settles_stale.count = stale

    def tick_enqueued(self, schedule: str) -> None:
        """The scheduler won a tick's lock and enqueued the job."""
        self.ticks_enqueued.labels(self.queue, schedule).inc()

    def tick_skipped(self, schedule: str) -> None:
        """The scheduler found a tick's lock taken by another worker."""
        self.ticks_skipped.labels(self.queue, schedule).inc()

    # ---------------------------------------------------- queue-wide gauges

    def chore(self) -> Chore:
        return Chore("metrics", self.settings.metrics_interval_s, self.refresh_queue_state)

    async def refresh_queue_state(self) -> None:
        """Hold (or take) the metrics lock and read the queue's state; drop it when not holding."""
        try:
            self._holding = await self._hold_lock()
            if self._holding:
                self.queue_collector.states = {
                    queue: await read_partitions_state_async(
                        self.redis, partition_keys(self.settings, queue), reclaim_idle_ms=self.settings.reclaim_idle_ms
                    )
                    for queue in self.labelled_queues
                }
                # Every queue served or declared, in use or not: a scaler needs its 0, not an absent series.
                queues = queue_names(
                    [*self.labelled_queues, *await known_queues_async(self.redis, self.settings.prefix)]
                )
                parts = [keys for queue in queues for keys in partition_keys(self.settings, queue)]
                self.backlog.readings = await read_backlog_async(self.redis, parts, time.time())
                self.awaiting.reading = await read_awaiting_async(self.redis, parts, CLOCK.now())
                if self.archive is not None:
                    self.archive.backlog = await read_partitions_backlog(
                        self.redis, partition_keys(self.settings), time.time()
                    )
            else:
                self._drop_queue_readings()
        except BaseException:
            self._drop_queue_readings()
            raise

    def _drop_queue_readings(self) -> None:
        """Export no queue-wide series: not the lock holder, or the reading failed (never stale numbers)."""
        self.queue_collector.states = self.backlog.readings = self.awaiting.reading = None
        if self.archive is not None:
            self.archive.backlog = None

    async def _hold_lock(self) -> bool:
        if self._holding:
            try:
                await self._lock.reacquire()
                return True
            except redis.exceptions.LockError:
                log.info(
                    "Worker %s lost the metrics lock; another worker reports the queue.", self.settings.worker_name
                )
        taken = bool(await self._lock.acquire(token=self.settings.worker_name))
        if taken:
            log.info("Worker %s reports the queue-wide metrics.", self.settings.worker_name)
        return taken

    # ---------------------------------------------------------------- server

    def serve(self) -> None:
        """Start the HTTP endpoint (a few daemon threads) on METRICS_HOST:METRICS_PORT."""
        self._server = MetricsEndpoint(self.registry, self.settings.metrics_host, self.settings.metrics_port).start()
        log.info(
            "Serving Prometheus metrics on http://%s:%d/metrics.",
            self.settings.metrics_host,
            self.settings.metrics_port,
        )

    async def close(self) -> None:
        """Release the lock (so another worker takes over at once) and stop the endpoint."""
        if self._holding:
            with unless_lost(redis.exceptions.LockError):
                await self._lock.release()
            self._holding = False
        if self._server is not None:
            self._server.close()
            self._server = None


@contextlib.asynccontextmanager
async def worker_metrics(
    app: WorkerApp, registry: Registry, archiver: Archiver | None = None
) -> AsyncIterator[list[Metrics]]:
    """Serve metrics on METRICS_PORT while the worker runs; yield the observers to pass to the loop and
    the scheduler; ``registry``'s kinds and schedules are the label values. With ``archiver``, the archive's
    metrics too.

    The caller enters it only when METRICS_PORT is set, so that a worker without metrics never
    imports this module (prometheus_client).
    """
    metrics = Metrics(app.settings, app.redis, registry, archiver)
    metrics.serve()
    app.add_chore(metrics.chore())
    try:
        yield [metrics]
    finally:
        await metrics.close()
