"""What the consumer loop reports about each job (its wait at start, its outcome), and the tally behind its
summary line.

A job's wait is its start time minus the time its entry was added to ``jobs``
(the milliseconds of the entry id, see :func:`worker.store.wire.entry_epoch_s`): for a job
enqueued now, the time in the queue; for a retry or a delayed job, the time
since promotion made it runnable; for an entry reclaimed from a dead worker,
the whole time since it was added.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Sequence

from worker.observability.observer import Observer, overrides
from worker.store.queues import DEFAULT_QUEUE
from worker.store.vocabulary import OUTCOME_SUCCEEDED


class Successes:
    """The successes since the loop last read, handed to the observers together (:meth:`hand_over`).

    A success is the report every job makes, up to 100,000 a second. Each
    appends its kind and run time here; the observers get the two lists at the
    next read (about a hundred jobs under load, one when the queue is quiet:
    a success frees a slot, which wakes the loop to read), one call each,
    instead of a call per observer and job. The lists are reused: an
    observer counts what it needs from them and keeps no reference.
    """

    __slots__ = ("durations_s", "kinds", "observers", "queue")

    def __init__(self, observers: Iterable[Observer], queue: str = DEFAULT_QUEUE) -> None:
        self.queue = queue
        """The named queue of the partition whose successes these are (one list per partition)."""
        self.kinds: list[str] = []
        self.durations_s: list[float] = []
        self.observers = overrides(observers, "jobs_succeeded")

    def hand_over(self) -> None:
        """Report what gathered to every observer, and start again."""
        if not self.kinds:
            return
        for observer in self.observers:
            observer.jobs_succeeded(self.kinds, self.durations_s, self.queue)
        self.kinds.clear()
        self.durations_s.clear()


class Tally(Observer):
    """Counts outcomes per kind for the periodic summary log line, and keeps when each kind last succeeded
    (published with the kinds a worker runs: ``opslib.kinds()``'s ``last_succeeded_at``)."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self.since = time.monotonic()
        self.last_success: dict[str, float] = {}

    def job_finished(
        self, kind: str, outcome: str, duration_s: float, reason: str | None, queue: str = DEFAULT_QUEUE
    ) -> None:
        if outcome == OUTCOME_SUCCEEDED:
            self.jobs_succeeded((kind,), (duration_s,))
        else:
            self.counts[(kind, outcome)] += 1

    def jobs_succeeded(self, kinds: Sequence[str], durations_s: Sequence[float], queue: str = DEFAULT_QUEUE) -> None:
        now, counts, last_success = time.time(), self.counts, self.last_success
        for kind, count in Counter(kinds).items():
            counts[(kind, OUTCOME_SUCCEEDED)] += count
            last_success[kind] = now

    def take(self) -> tuple[Counter[tuple[str, str]], float]:
        counts, self.counts = self.counts, Counter()
        now = time.monotonic()
        elapsed, self.since = now - self.since, now
        return counts, elapsed
