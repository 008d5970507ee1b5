"""``WORKER_PROCESSES=N``: one supervisor, N worker processes, one consumer each.

One worker process uses one core (asyncio, one thread for the loop). Where a
container is given several cores, the supervisor runs N worker children,
each its own consumer in group ``workers`` named ``<WORKER_NAME>-<i>``, on
the servers the supervisor resolved (the embedded ones it started, when no
URL is set). It forks them after it imported the kinds
(:mod:`worker.cli.forked`), so that two processes start about as fast as
one. Like a prefork server, it:

* restarts a child that dies, after a backoff that grows while children keep
  dying soon after their start (a poison entry that kills its worker is the
  reclaim loop's business: the restarted child buries it after
  ``MAX_DELIVERIES``);
* forwards SIGTERM/SIGINT to every child, waits up to ``SHUTDOWN_GRACE_S``
  (and a little more for the children's own goodbye) for their drain, then
  kills what is left;
* serves one ``/metrics`` on ``METRICS_HOST:METRICS_PORT`` that merges every
  child's series (each child serves on a loopback port of its own) with a
  ``process`` label, plus ``<METRICS_NAMESPACE>_worker_processes`` and
  ``<METRICS_NAMESPACE>_worker_restarts_total``.

The scheduler's tick lock already makes one enqueue per tick whatever the
number of consumers, so every child runs the scheduler. Under ``--burst``
a child that exits 0 found the queue drained and is not restarted; the
supervisor exits when all have.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import FrameType

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from worker.cli.forked import ForkedChild, fork_worker
from worker.embedded.servers import free_port
from worker.observability.endpoint import MetricsEndpoint
from worker.settings import Settings
from worker.store.reconnect import backoff_s

log = logging.getLogger("worker.cli.supervisor")

#: A child that lived this long before dying starts the backoff from the beginning.
STEADY_S = 60.0
#: The restart backoff: 0.5 s after the first quick death, doubling to 30 s (jittered).
RESTART_BASE_S, RESTART_CAP_S = 0.5, 30.0
#: The children's goodbye (acks flushed, heartbeat deleted) after SHUTDOWN_GRACE_S.
GOODBYE_S = 5.0
#: How often the supervisor looks at its children (also its reaction time to a signal).
TICK_S = 0.1
SCRAPE_TIMEOUT_S = 2.0


@dataclass
class Child:
    """One worker process slot: restarted in place when its process dies."""

    index: int
    name: str
    metrics_port: int
    proc: ForkedChild | None = None
    started_at: float = 0.0
    quick_deaths: int = 0
    restart_at: float | None = None
    finished: bool = False


@dataclass
class Supervisor:
    """Runs ``settings.processes`` worker children until a signal (or, in burst mode, the drain)."""

    settings: Settings
    redis_url: str
    database_url: str
    #: A child's life once forked: serve one worker with (settings, redis URL, database URL, burst) until it
    #: stops, returning its exit code (:func:`worker.cli.serve.serve_forked_child`, with the registry).
    serve_child: Callable[[Settings, str, str, bool], int]
    burst: bool = False
    restarts: int = 0
    stopping: threading.Event = field(default_factory=threading.Event)
    children: list[Child] = field(default_factory=list)

    def __post_init__(self) -> None:
        serve_metrics = self.settings.metrics_port > 0
        self.children = [
            Child(i, f"{self.settings.worker_name}-{i}", free_port() if serve_metrics else 0)
            for i in range(self.settings.processes)
        ]

    def child_settings(self, child: Child) -> Settings:
        """The supervisor's settings with the child's consumer name and loopback metrics port (a URL read
        from a file is read again from it at each connection, as in one process)."""
        return dataclasses.replace(
            self.settings,
            processes=1,
            worker_name=child.name,
            metrics_port=child.metrics_port,
            metrics_host="127.0.0.1",
        )

    def start(self, child: Child) -> None:
        settings = self.child_settings(child)
        child.proc = fork_worker(lambda: self.serve_child(settings, self.redis_url, self.database_url, self.burst))
        child.started_at = time.monotonic()
        child.restart_at = None
        log.info("Started worker process %d (pid %d) as consumer %s.", child.index, child.proc.pid, child.name)

    def run(self) -> int:
        """Start the children and watch them; the exit code is 0 unless a burst child failed."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        server = self._serve_metrics()
        try:
            for child in self.children:
                self.start(child)
            while not self.stopping.is_set() and not all(c.finished for c in self.children):
                self._watch(time.monotonic())
                self.stopping.wait(TICK_S)
            return self._stop_children()
        finally:
            if server is not None:
                server.close()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if not self.stopping.is_set():
            log.info(
                "Supervisor got %s: stopping %d worker processes.", signal.Signals(signum).name, len(self.children)
            )
        self.stopping.set()

    def _watch(self, now: float) -> None:
        for child in self.children:
            if child.finished:
                continue
            if child.proc is None:
                if child.restart_at is not None and now >= child.restart_at:
                    self.start(child)
                continue
            code = child.proc.poll()
            if code is None:
                continue
            if self.burst and code == 0:
                child.finished = True
                continue
            lived = now - child.started_at
            child.quick_deaths = 0 if lived >= STEADY_S else child.quick_deaths + 1
            delay = backoff_s(child.quick_deaths, base_s=RESTART_BASE_S, cap_s=RESTART_CAP_S)
            log.warning(
                "Worker process %d (pid %d) exited with code %d after %.1f s; restarting it in %.1f s.",
                child.index,
                child.proc.pid,
                code,
                lived,
                delay,
            )
            child.proc = None
            child.restart_at = now + delay
            self.restarts += 1

    def _stop_children(self) -> int:
        running = [c.proc for c in self.children if c.proc is not None and c.proc.poll() is None]
        for proc in running:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.settings.shutdown_grace_s + GOODBYE_S
        for proc in running:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("Worker process pid %d did not stop in time; killing it.", proc.pid)
                proc.kill()
                proc.wait()
        codes = [c.proc.returncode for c in self.children if c.proc is not None]
        failed = self.burst and any(code != 0 for code in codes)
        return 1 if failed else 0

    # ------------------------------------------------------------------ metrics

    def _serve_metrics(self) -> MetricsEndpoint | None:
        if self.settings.metrics_port <= 0:
            return None
        registry = CollectorRegistry(auto_describe=False)
        registry.register(ChildrenCollector(self))
        return MetricsEndpoint(registry, self.settings.metrics_host, self.settings.metrics_port).start()


class ChildrenCollector(Collector):
    """Every child's series with a ``process`` label, merged by family; and the supervisor's own."""

    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor
        # Loopback scrapes ignore proxy settings from the environment.
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def collect(self) -> Iterator[Metric]:
        children = self.supervisor.children
        ns = self.supervisor.settings.metrics_namespace
        alive = sum(1 for c in children if c.proc is not None and c.proc.poll() is None)
        processes = GaugeMetricFamily(f"{ns}_worker_processes", "Worker processes running under the supervisor.")
        processes.add_metric([], alive)
        yield processes
        restarts = CounterMetricFamily(f"{ns}_worker_restarts", "Worker processes the supervisor restarted.")
        restarts.add_metric([], self.supervisor.restarts)
        yield restarts
        scraped = {}
        for child in children:
            if child.proc is None or child.proc.poll() is not None:
                continue
            try:
                with self.opener.open(f"http://127.0.0.1:{child.metrics_port}/metrics", timeout=SCRAPE_TIMEOUT_S) as r:
                    scraped[child.index] = r.read().decode()
            except OSError:
                continue  # starting or stopping: its series are absent from this scrape
        yield from merge_families(scraped)


def merge_families(texts: Mapping[int, str]) -> Iterable[Metric]:
    """Parse each process's exposition and merge the families, labelling samples ``process=<i>``."""
    merged: dict[str, Metric] = {}
    for index, exposition in sorted(texts.items()):
        for family in text_string_to_metric_families(exposition):
            target = merged.setdefault(family.name, Metric(family.name, family.documentation, family.type))
            for sample in family.samples:
                target.samples.append(sample._replace(labels={**sample.labels, "process": str(index)}))
    return merged.values()
