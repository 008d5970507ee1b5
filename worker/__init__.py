"""A job queue on Redis Streams: kinds with retry policies, schedules, a dead-letter stream and its archive.

It knows no application: an application declares its kinds in modules of its
own and names them in ``WORKER_KINDS``::

    # myapp/kinds.py
    from worker import Job, RetryPolicy, job_kind

    @job_kind("send_receipt", retry=RetryPolicy(retries=3))
    async def send_receipt(job: Job) -> None: ...

    $ WORKER_KINDS=myapp.kinds QUEUE_PREFIX={jobs}: python -m worker

Public names (docs/worker.md): :func:`job_kind`, :class:`RetryPolicy`, :class:`Job`,
:func:`connect` (the client the settings call for: single server or cluster),
:func:`enqueue` (and :func:`enqueue_async`; :func:`enqueue_many` and
:func:`enqueue_many_async` for a batch of :class:`NewJob`; each raises :class:`QueueRefused` when Redis
refuses the write), :func:`lifespan`, :func:`schedule`
(declared in :mod:`worker.schedules`, run by :mod:`worker.loop.scheduler`), :func:`run_worker` (one
worker in this process, docs/worker.md). ``python -m worker --help`` lists the commands and every setting.
"""

from __future__ import annotations

import threading

from worker.app import Chore, WorkerApp
from worker.errors import QueueRefused
from worker.kinds import REGISTRY, Job, Registry, job_kind, lifespan
from worker.retry import RetryPolicy
from worker.schedules import schedule
from worker.settings import Settings
from worker.store.connection import connect
from worker.store.enqueue import NewJob, enqueue, enqueue_async, enqueue_many, enqueue_many_async

__all__ = [
    "Chore",
    "Job",
    "NewJob",
    "QueueRefused",
    "RetryPolicy",
    "WorkerApp",
    "connect",
    "enqueue",
    "enqueue_async",
    "enqueue_many",
    "enqueue_many_async",
    "job_kind",
    "lifespan",
    "run_worker",
    "schedule",
]


def run_worker(
    settings: Settings | None = None,
    *,
    registry: Registry = REGISTRY,
    burst: bool = False,
    stop: threading.Event | None = None,
) -> int:
    """Run one worker in this process until it stops: SIGTERM or SIGINT (when called in the main thread),
    ``stop`` set (from any thread), or, with ``burst``, the queue drained. For tests, benchmarks and
    applications that embed a worker; ``python -m worker`` is the same worker, with argument parsing.

    ``settings`` defaults to :meth:`Settings.from_env() <worker.settings.Settings.from_env>`; its
    ``kinds`` are imported (or ``registry`` already holds kinds); without ``REDIS_URL`` (nor any other
    server URL) the embedded servers start, as for ``python -m worker``. ``WORKER_PROCESSES`` is not
    read: this is one worker. Returns the exit code (0 on a clean stop); raises
    :class:`~worker.errors.SettingsError` on a bad setting.

    The loop is imported here, at the call, not with ``import worker``: a process that only enqueues
    never loads it.
    """
    from worker.cli.serve import run

    return run(settings or Settings.from_env(), registry=registry, burst=burst, stop=stop, one_process=True)
