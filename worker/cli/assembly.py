"""Building a worker from its :class:`~worker.settings.Settings`: the one place that does.

:func:`assembled` makes everything one worker process holds, in order: the
Redis client, the :class:`~worker.app.WorkerApp` its lifespans see, the
archiver (``ARCHIVE_URL``), the metrics (``METRICS_PORT``), the flow counters,
the registry's lifespans, the scheduler chore, then the loop itself
(:class:`~worker.loop.runner.Worker`: partitions, executor, slots, read loop,
chores). ``python -m worker``, each child of the supervisor and
:func:`worker.run_worker` all run what it yields (:func:`worker.cli.serve.serve`);
nothing else builds a worker or reaches into its parts.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from worker.app import WorkerApp
from worker.kinds import Registry
from worker.loop.runner import Worker
from worker.loop.scheduler import scheduler_chore
from worker.observability.flow import worker_flow
from worker.settings import Settings
from worker.store.connection import connect_async, network_options
from worker.store.partitions import record_count

if TYPE_CHECKING:
    from worker.archive.archiver import Archiver
    from worker.observability.metrics import Metrics

# The archive (psycopg) and the metrics endpoint (prometheus_client) are imported where they are switched
# on: psycopg alone adds about 55 ms to every start, of a worker or of `health`.


@contextlib.asynccontextmanager
async def assembled(
    settings: Settings, redis_url: str, database_url: str, *, registry: Registry, burst: bool = False
) -> AsyncIterator[Worker]:
    """One worker of ``registry``'s kinds on the given servers, with its lifespans entered; all of it is
    closed again on exit (lifespans, archiver, metrics, then the client)."""
    client = await connect_async(settings, redis_url, **network_options(settings))
    app = WorkerApp(settings, client, redis_url, database_url, burst=burst)
    try:
        await record_count(client, settings)
        async with contextlib.AsyncExitStack() as stack:
            archiver: Archiver | None = None
            if settings.archive_on:
                from worker.archive.archiver import Archiver

                archiver = Archiver(client, settings, app.archive_conninfo, migrate=settings.archive_migrates)
                stack.push_async_callback(archiver.close)
                await archiver.start()
                for chore in archiver.chores():
                    app.add_chore(chore)
                app.add_more_work(archiver.has_work)
            observers: list[Metrics] = []
            if settings.metrics_port:
                from worker.observability.metrics import worker_metrics

                observers = await stack.enter_async_context(worker_metrics(app, registry, archiver))
            flow = await stack.enter_async_context(worker_flow(app, registry))
            for lifespan in registry.lifespans:
                await stack.enter_async_context(lifespan(app))
            scheduler = scheduler_chore(app, registry, observers)
            if scheduler is not None:
                app.add_chore(scheduler)
            worker = Worker(
                client,
                settings,
                registry,
                burst=burst,
                chores=app.chores,
                observers=[*observers, *flow],
                more_work=app.more_work,
            )
            for metrics in observers:
                metrics.watch_outcomes(worker.outcomes_waiting)
                metrics.watch_fleet(lambda: tuple(worker.fleet.seen))
                metrics.watch_stale(lambda: sum(part.outcomes.stale.count for part in worker.parts))
            yield worker
    finally:
        await client.aclose()
