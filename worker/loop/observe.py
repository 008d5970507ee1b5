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
from typing import Protocol

from worker.store.vocabulary import OUTCOME_SUCCEEDED


class Observer(Protocol):
    """What the loop reports about each job it starts and finishes (metrics implement it)."""

    def job_started(self, kind: str, wait_s: float) -> None:
        """A job's handler is about to run; ``wait_s``: start time minus the entry's time on ``jobs``."""

    def job_finished(self, kind: str, outcome: str, duration_s: float, reason: str | None) -> None: ...


class Tally:
    """Counts outcomes per kind for the periodic summary log line, and keeps when each kind last succeeded
    (published with the kinds a worker runs: ``opslib.kinds()``'s ``last_succeeded_at``)."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self.since = time.monotonic()
        self.last_success: dict[str, float] = {}

    def job_started(self, kind: str, wait_s: float) -> None:
        """The summary line counts outcomes only."""

    def job_finished(self, kind: str, outcome: str, duration_s: float, reason: str | None) -> None:
        self.counts[(kind, outcome)] += 1
        if outcome == OUTCOME_SUCCEEDED:
            self.last_success[kind] = time.time()

    def take(self) -> tuple[Counter[tuple[str, str]], float]:
        counts, self.counts = self.counts, Counter()
        now = time.monotonic()
        elapsed, self.since = now - self.since, now
        return counts, elapsed
