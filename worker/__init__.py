"""Stagedoor's job system: one queue on Redis Streams.

Public names (DESIGN.md): :func:`job_kind`, :class:`RetryPolicy`, :class:`Job`,
:func:`connect` (the client the settings call for: single server or cluster),
:func:`enqueue` (and :func:`enqueue_async`; :func:`enqueue_many` and
:func:`enqueue_many_async` for a batch of :class:`NewJob`), :func:`lifespan`, :func:`schedule`
(declared in :mod:`worker.schedules`, run by :mod:`worker.scheduler`). ``python -m worker --help``
lists the commands and every setting.
"""

from worker.connection import connect
from worker.enqueue import NewJob, enqueue, enqueue_async, enqueue_many, enqueue_many_async
from worker.kinds import Job, job_kind, lifespan
from worker.retry import RetryPolicy
from worker.schedules import schedule

__all__ = [
    "Job",
    "NewJob",
    "RetryPolicy",
    "connect",
    "enqueue",
    "enqueue_async",
    "enqueue_many",
    "enqueue_many_async",
    "job_kind",
    "lifespan",
    "schedule",
]
