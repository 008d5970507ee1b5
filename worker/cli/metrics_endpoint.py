"""``python -m worker metrics``: the backlog gauges on their own, for an autoscaler to read.

The scaler's source must not depend on a running worker: at zero replicas no
worker exports anything, and a scaler that reads nothing must not take that for
an empty queue. This process needs no job kinds and no PostgreSQL: it serves
``<ns>_backlog`` and ``<ns>_running`` (:mod:`worker.observability.backlog`) on
``METRICS_HOST:METRICS_PORT``, read from Redis at each scrape, for every
partition of the count recorded on the queue, of every queue in use and every
queue ``WORKER_QUEUES`` names (a 0 for one never used: a scaler must read 0,
not an absent series, to scale its deployment to zero). A scrape while Redis does not
answer gets no backlog series (never a 0) and one warning line.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import redis.exceptions
from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from worker.cli.exits import EXIT_OK
from worker.errors import SettingsError
from worker.observability.backlog import backlog_families, read_backlog
from worker.observability.endpoint import MetricsEndpoint
from worker.redact import one_line, redact
from worker.settings import Settings
from worker.store.connection import connect
from worker.store.partitions import keys_for, known_queues, queue_names, recorded_count

log = logging.getLogger("worker.metrics")


class LiveBacklog(Collector):
    """The backlog of every partition of every queue in use, read at each scrape (a few round trips)."""

    def __init__(self, client: Any, settings: Settings) -> None:
        self.client = client
        self.settings = settings

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        prefix = self.settings.prefix
        try:
            count = recorded_count(self.client, prefix) or self.settings.partitions
            named = [served.name for served in self.settings.queues]  # a series (0 too) for each, in use or not
            queues = queue_names([*named, *known_queues(self.client, prefix)])
            parts = [keys for queue in queues for keys in keys_for(prefix, count, queue)]
            readings = read_backlog(self.client, parts, time.time())
        except (redis.exceptions.RedisError, OSError) as exc:
            log.warning("Could not read the backlog from Redis: %s", redact(one_line(exc)))
            return
        yield from backlog_families(self.settings.metrics_namespace, readings)


def serve_backlog(settings: Settings, stop: threading.Event | None = None) -> int:
    """Serve the backlog gauges until SIGTERM or SIGINT (or ``stop``, for a caller in-process)."""
    if not settings.metrics_port:
        raise SettingsError("python -m worker metrics needs METRICS_PORT, the port to serve /metrics on (e.g. 9108)")
    if not settings.redis_url:
        raise SettingsError("python -m worker metrics needs REDIS_URL (or REDIS_URL_FILE) to read the backlog from")
    registry = CollectorRegistry()
    registry.register(LiveBacklog(connect(settings, socket_timeout=5, socket_connect_timeout=5), settings))
    endpoint = MetricsEndpoint(registry, settings.metrics_host, settings.metrics_port).start()
    log.info("Serving the backlog gauges on http://%s:%d/metrics.", settings.metrics_host, settings.metrics_port)
    if stop is None:
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
    try:
        while not stop.wait(1.0):  # a timed wait, so that the signal's handler runs promptly
            pass
    finally:
        endpoint.close()
    log.info("Stopped serving the backlog gauges.")
    return EXIT_OK
