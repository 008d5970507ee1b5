"""What the consumer loop reports about each finished job, and the tally behind its summary line."""

from __future__ import annotations

import time
from collections import Counter
from typing import Protocol


class Observer(Protocol):
    """What the loop reports about each finished job (metrics implement it)."""

    def job_finished(self, kind: str, outcome: str, duration_s: float, reason: str | None) -> None: ...


class Tally:
    """Counts outcomes per kind for the periodic summary log line."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self.since = time.monotonic()

    def job_finished(self, kind: str, outcome: str, duration_s: float, reason: str | None) -> None:
        self.counts[(kind, outcome)] += 1

    def take(self) -> tuple[Counter[tuple[str, str]], float]:
        counts, self.counts = self.counts, Counter()
        now = time.monotonic()
        elapsed, self.since = now - self.since, now
        return counts, elapsed
