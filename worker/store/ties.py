"""Jobs for later due at the same moment, kept in enqueue order (the ``delayed`` score; docs/worker.md,
"Unique jobs and idempotent enqueue")."""

from __future__ import annotations

import math
import threading


class Ties:
    """The score of a job for later, kept in enqueue order among this process's jobs due at the same moment
    in the same ``delayed`` set.

    ``delayed`` orders members of equal score by their bytes (a random job id among them), so jobs given one
    ``run_at`` would be promoted in random order. A due time equal to the previous one this process gave for
    the same set gets the next float above the previous score (``math.nextafter``: 0.24 µs at today's
    epoch), so that the later enqueue sorts after; the run time is unchanged to the microsecond. Jobs of
    different processes due at the same moment still sort by their bytes."""

    def __init__(self) -> None:
        self.last: dict[str, tuple[float, float]] = {}
        """Per ``delayed`` key: the due time given last and the score it got."""
        self.lock = threading.Lock()

    def score_of(self, delayed: str, due: float) -> float:
        with self.lock:
            given, score = self.last.get(delayed, (math.nan, math.nan))
            score = math.nextafter(score, math.inf) if due == given else due
            self.last[delayed] = (due, score)
            return score


TIES = Ties()
