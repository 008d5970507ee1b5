"""What the loop reports about each job it runs, as hooks an observer overrides only where it cares.

The metrics (:mod:`worker.observability.metrics`), the flow counters
(:mod:`worker.observability.flow`) and the burst tally
(:class:`worker.loop.observe.Tally`) subclass :class:`Observer`; each hook
does nothing unless overridden, and the loop calls ``job_started`` and
``jobs_succeeded`` only on the observers that override them
(:func:`overrides`), so a hook nobody needs costs a job nothing (as
Dramatiq's ``Middleware``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from worker.store.queues import DEFAULT_QUEUE


class Observer:
    """Hooks on a job's life in the loop; each does nothing unless a subclass overrides it."""

    def job_started(self, kind: str, wait_s: float, queue: str = DEFAULT_QUEUE) -> None:
        """A job's handler is about to run; ``wait_s``: start time minus the entry's time on ``jobs``; ``queue``:
        the named queue its entry came from (every hook has it: the executor knows the entry's partition)."""

    def job_finished(
        self, kind: str, outcome: str, duration_s: float, reason: str | None, queue: str = DEFAULT_QUEUE
    ) -> None:
        """A job was retried or dead-lettered (successes come in :meth:`jobs_succeeded`)."""

    def jobs_succeeded(self, kinds: Sequence[str], durations_s: Sequence[float], queue: str = DEFAULT_QUEUE) -> None:
        """Jobs of ``queue`` whose handlers returned since the last report: each one's kind and run time, in step."""

    def job_handed_back(self, kind: str, waiting: bool, queue: str = DEFAULT_QUEUE) -> None:
        """A job of ``queue`` this worker cannot run was handed back, within its queue: for a live worker that
        runs it, or (``waiting``) into ``delayed`` because none does yet (:mod:`worker.loop.handback`)."""


def overrides(observers: Iterable[Observer], hook: str) -> list[Observer]:
    """The ``observers`` whose class overrides ``hook`` (the others would be called for nothing)."""
    base = getattr(Observer, hook)
    return [observer for observer in observers if getattr(type(observer), hook, base) is not base]
