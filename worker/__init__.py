"""Stagedoor's job system: one queue on Redis Streams.

Public names (DESIGN.md): :func:`job_kind`, :class:`RetryPolicy`, :class:`Job`,
:func:`enqueue` (and :func:`enqueue_async`), :func:`lifespan`; the scheduler's
``schedule`` lives in :mod:`worker.scheduler`. ``python -m worker --help``
lists the commands and every setting.
"""

from worker.enqueue import enqueue, enqueue_async
from worker.kinds import Job, job_kind, lifespan
from worker.retry import RetryPolicy

__all__ = ["Job", "RetryPolicy", "enqueue", "enqueue_async", "job_kind", "lifespan"]
