"""Retry policies and the pure decision "retry after d seconds, or dead-letter".

The policy is data declared with the kind (Dramatiq's ``compute_backoff``,
Sidekiq's ``delay_for``); the decision is a small function with no I/O so it
can be tested exhaustively. Full jitter: the delay before retry n+1 is
``uniform(0, min(cap_s, base_s * 2**n))`` where n is the number of failed
attempts before the one that just failed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """How many times a kind is retried and how long it waits in between."""

    retries: int = 0
    base_s: float = 1.0
    cap_s: float = 60.0

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries}")
        if self.base_s <= 0 or self.cap_s < self.base_s:
            raise ValueError(f"need 0 < base_s <= cap_s, got base_s={self.base_s} cap_s={self.cap_s}")

    def backoff_bound_s(self, failed_before: int) -> float:
        """The largest delay before the retry that follows ``failed_before`` failures."""
        # 2**n overflows float for very large n; the cap is reached long before.
        return min(self.cap_s, self.base_s * 2 ** min(failed_before, 64))


@dataclass(frozen=True)
class Retry:
    """Run the job again after ``delay_s`` with ``attempts`` failed attempts recorded."""

    delay_s: float
    attempts: int


@dataclass(frozen=True)
class DeadLetter:
    """Do not retry: the job made ``attempts`` attempts and goes to ``jobs:dead``."""

    attempts: int


def decide(policy: RetryPolicy, failed_before: int, rng: random.Random | None = None) -> Retry | DeadLetter:
    """Decide what follows a failed attempt.

    ``failed_before`` is the job's ``attempts`` field: failed attempts before
    the one that just failed. With ``retries=1`` the first failure retries and
    the second dead-letters with attempts 2.
    """
    made = failed_before + 1
    if failed_before >= policy.retries:
        return DeadLetter(attempts=made)
    uniform = (rng or random).uniform
    return Retry(delay_s=uniform(0.0, policy.backoff_bound_s(failed_before)), attempts=made)
