"""Serving: a worker process from its :class:`~worker.settings.Settings`, with no argument parsing.

``python -m worker`` parses its arguments (:mod:`worker.cli.main`) and calls
:func:`run`; an application or a test can do the same, or await
:func:`serve` on servers it already has::

    settings = Settings.from_env(kinds="myapp.kinds")
    sys.exit(run(settings, burst=True))

    await serve(settings, "redis://127.0.0.1:6379/0", "", burst=True)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from worker.app import WorkerApp
from worker.cli.exits import EXIT_OK
from worker.cli.fail_closed import use_embedded
from worker.cli.stop_deadline import StopDeadline
from worker.embedded.servers import embedded_stack
from worker.errors import SettingsError
from worker.kinds import REGISTRY, Registry, import_kind_modules
from worker.loop.runner import Worker
from worker.loop.scheduler import scheduler_chore
from worker.observability.flow import worker_flow
from worker.settings import Settings
from worker.store.connection import connect_async, network_options
from worker.store.partitions import record_count

if TYPE_CHECKING:
    from worker.archive.archiver import Archiver
    from worker.observability.metrics import Metrics

# The archive (psycopg), the metrics endpoint (prometheus_client) and the supervisor are imported where
# they are switched on: psycopg alone adds about 55 ms to every start, of a worker or of `health`.

log = logging.getLogger("worker")


def import_kinds(settings: Settings, registry: Registry = REGISTRY) -> None:
    """Import the modules that declare the kinds; the one-line hint when none is named and ``registry``
    holds none either (an application may have declared its kinds in a registry of its own)."""
    if not settings.kinds and not registry.kinds:
        raise SettingsError("no job kinds: set WORKER_KINDS (e.g. WORKER_KINDS=myapp.kinds) or pass --kinds")
    import_kind_modules(settings.kinds)


async def serve(
    settings: Settings, redis_url: str, database_url: str, *, registry: Registry = REGISTRY, burst: bool = False
) -> None:
    """Run one worker of ``registry``'s kinds, with its lifespans, on the given servers until SIGTERM or
    SIGINT (or, with ``burst``, until the queue is drained): the whole worker, without argparse. Its stop
    takes at most SHUTDOWN_GRACE_S and a few seconds (:mod:`worker.cli.stop_deadline`)."""
    deadline = StopDeadline(settings.shutdown_grace_s)
    await deadline.guard(_serve(settings, redis_url, database_url, registry, burst, deadline))


async def _serve(
    settings: Settings, redis_url: str, database_url: str, registry: Registry, burst: bool, deadline: StopDeadline
) -> None:
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
                metrics.watch_outcomes(lambda: worker.episode.waiting)
                metrics.watch_stale(lambda: sum(part.outcomes.stale.count for part in worker.parts))
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, functools.partial(stop, worker, deadline))
            await worker.run()
    finally:
        await client.aclose()


def stop(worker: Worker, deadline: StopDeadline) -> None:
    """SIGTERM or SIGINT: the worker stops reading, and its stop's deadline starts."""
    worker.stop()
    deadline.arm()


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` on uvloop (about twice asyncio's speed for this loop) when installed."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)


def run(settings: Settings, *, registry: Registry = REGISTRY, burst: bool = False) -> int:
    """Import ``settings.kinds``, start the embedded servers when no server URL is set at all (the
    ``embedded`` extra; :mod:`worker.cli.fail_closed`),
    then serve: one worker in this process, or ``WORKER_PROCESSES`` under the supervisor. Returns the exit
    code (0 on a clean stop); raises :class:`~worker.errors.SettingsError` on a bad setting."""
    import_kinds(settings, registry)
    embedded = use_embedded(settings, need_redis=True, need_database=registry.needs_database, need_archive=True)
    try:
        with embedded_stack(
            settings.redis_url,
            settings.database_url,
            data_dir=Path(settings.data_dir),
            need_postgres=embedded and (registry.needs_database or settings.archive_on),
            need_redis=embedded,
        ) as (redis_url, database_url):
            if not settings.redis_url:
                log.info("REDIS_URL is unset: started the embedded Valkey at %s.", redis_url)
            if database_url and not settings.database_url:
                log.info("DATABASE_URL is unset: started the embedded PostgreSQL at %s.", database_url)
            if settings.processes > 1:
                from worker.cli.supervisor import Supervisor

                child = functools.partial(serve_forked_child, registry=registry)
                return Supervisor(settings, redis_url, database_url, child, burst=burst).run()
            run_loop(serve(settings, redis_url, database_url, registry=registry, burst=burst))
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def serve_forked_child(
    settings: Settings, redis_url: str, database_url: str, burst: bool, *, registry: Registry
) -> int:
    """A forked child's life (:mod:`worker.cli.forked`): one worker until it stops (a SIGINT before the
    loop runs is a stop too)."""
    with contextlib.suppress(KeyboardInterrupt):
        run_loop(serve(settings, redis_url, database_url, registry=registry, burst=burst))
    return EXIT_OK
