"""Serving: a worker process from its :class:`~worker.settings.Settings`, with no argument parsing.

``python -m worker`` parses its arguments (:mod:`worker.cli.main`) and calls
:func:`run`; an application or a test runs one worker in its own process
with :func:`worker.run_worker` (which calls :func:`run` with ``one_process``), or awaits
:func:`serve` on servers it already has::

    settings = Settings.from_env(kinds="myapp.kinds")
    sys.exit(run_worker(settings, burst=True))

    await serve(settings, "redis://127.0.0.1:6379/0", "", burst=True)

The worker itself is built in one place, :mod:`worker.cli.assembly`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from worker.cli.assembly import assembled
from worker.cli.exits import EXIT_OK
from worker.cli.fail_closed import use_embedded
from worker.cli.stop_deadline import StopDeadline
from worker.embedded.servers import embedded_stack
from worker.errors import SettingsError
from worker.kinds import REGISTRY, Registry, import_kind_modules
from worker.loop.runner import Worker
from worker.settings import Settings

# The supervisor is imported where it is switched on (WORKER_PROCESSES > 1), as the archive and the
# metrics are in worker.cli.assembly.

log = logging.getLogger("worker")
#: How often a worker run with a ``stop`` event looks at it.
STOP_POLL_S = 0.1


def import_kinds(settings: Settings, registry: Registry = REGISTRY) -> None:
    """Import the modules that declare the kinds; the one-line hint when none is named and ``registry``
    holds none either (an application may have declared its kinds in a registry of its own)."""
    if not settings.kinds and not registry.kinds:
        raise SettingsError("no job kinds: set WORKER_KINDS (e.g. WORKER_KINDS=myapp.kinds) or pass --kinds")
    import_kind_modules(settings.kinds)


async def serve(
    settings: Settings,
    redis_url: str,
    database_url: str,
    *,
    registry: Registry = REGISTRY,
    burst: bool = False,
    stop: threading.Event | None = None,
) -> None:
    """Run one worker of ``registry``'s kinds (built by :func:`worker.cli.assembly.assembled`) on the given
    servers until SIGTERM or SIGINT (in the main thread), until ``stop`` is set, or, with ``burst``, until
    the queue is drained: the whole worker, without argparse. Its stop takes at most SHUTDOWN_GRACE_S and a
    few seconds, whatever Redis or PostgreSQL do (:mod:`worker.cli.stop_deadline`)."""
    deadline = StopDeadline(settings.shutdown_grace_s)
    await deadline.guard(_serve(settings, redis_url, database_url, registry, burst, stop, deadline))


async def _serve(
    settings: Settings,
    redis_url: str,
    database_url: str,
    registry: Registry,
    burst: bool,
    stop: threading.Event | None,
    deadline: StopDeadline,
) -> None:
    async with assembled(settings, redis_url, database_url, registry=registry, burst=burst) as worker:
        if threading.current_thread() is threading.main_thread():
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, functools.partial(stopping, worker, deadline))
        watch = asyncio.create_task(_stop_when_set(stop, worker, deadline)) if stop is not None else None
        try:
            await worker.run()
        finally:
            if watch is not None:
                watch.cancel()


async def _stop_when_set(stop: threading.Event, worker: Worker, deadline: StopDeadline) -> None:
    """Stop ``worker`` once ``stop`` is set (by another thread: looked at every tenth of a second)."""
    while not stop.is_set():
        await asyncio.sleep(STOP_POLL_S)
    stopping(worker, deadline)


def stopping(worker: Worker, deadline: StopDeadline) -> None:
    """A signal or the stop event: the worker stops reading, and its stop's deadline starts."""
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


def run(
    settings: Settings,
    *,
    registry: Registry = REGISTRY,
    burst: bool = False,
    stop: threading.Event | None = None,
    one_process: bool = False,
) -> int:
    """Import ``settings.kinds``, start the embedded servers when no server URL is set at all (the
    ``embedded`` extra; :mod:`worker.cli.fail_closed`),
    then serve: one worker in this process, or ``WORKER_PROCESSES`` under the supervisor (unless
    ``one_process``). Returns the exit code (0 on a clean stop); raises
    :class:`~worker.errors.SettingsError` on a bad setting."""
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
            if settings.processes > 1 and not one_process:
                from worker.cli.supervisor import Supervisor

                child = functools.partial(serve_forked_child, registry=registry)
                return Supervisor(settings, redis_url, database_url, child, burst=burst).run()
            run_loop(serve(settings, redis_url, database_url, registry=registry, burst=burst, stop=stop))
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
