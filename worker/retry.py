"""Retry policies and the pure decision "retry after d seconds, or dead-letter".

The policy is data declared with the kind (Dramatiq's ``compute_backoff``,
Sidekiq's ``delay_for``); the decision is a small function with no I/O so it
can be tested exhaustively. Full jitter: the delay before retry n+1 is
``uniform(0, min(cap_s, base_s * 2**n))`` where n is the number of failed
attempts before the one that just failed. An error of a type the policy
lists in ``give_up_on`` (or of a subclass) is dead-lettered at once with
reason ``permanent``: a mail provider's 4xx refusal will not pass on retry.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from worker.store.vocabulary import REASON_EXHAUSTED, REASON_PERMANENT


@dataclass(frozen=True)
class RetryPolicy:
    """How many times a kind is retried, how long it waits in between, and which errors it gives up on."""

    retries: int = 0
    base_s: float = 1.0
    cap_s: float = 60.0
    give_up_on: tuple[type[BaseException], ...] = ()

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries}")
        if self.base_s <= 0 or self.cap_s < self.base_s:
            raise ValueError(f"need 0 < base_s <= cap_s, got base_s={self.base_s} cap_s={self.cap_s}")
        give_up_on = (self.give_up_on,) if isinstance(self.give_up_on, type) else tuple(self.give_up_on)
        for error in give_up_on:
            if not (isinstance(error, type) and issubclass(error, BaseException)):
                raise ValueError(f"give_up_on must list exception classes, got {error!r}")
        object.__setattr__(self, "give_up_on", give_up_on)

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
    """Do not retry: the job made ``attempts`` attempts and goes to ``jobs:dead`` with ``reason``."""

    attempts: int
    reason: str = REASON_EXHAUSTED


def decide(
    policy: RetryPolicy,
    failed_before: int,
    exc_type: type[BaseException],
    rng: random.Random | None = None,
) -> Retry | DeadLetter:
    """Decide what follows an attempt that failed with an error of type ``exc_type``.

    ``failed_before`` is the job's ``attempts`` field: failed attempts before
    the one that just failed. With ``retries=1`` the first failure retries and
    the second dead-letters with attempts 2. An ``exc_type`` that is one of
    ``policy.give_up_on`` (or a subclass of one) dead-letters at once with
    reason ``permanent``, whatever retries remain.
    """
    made = failed_before + 1
    if issubclass(exc_type, policy.give_up_on):
        return DeadLetter(attempts=made, reason=REASON_PERMANENT)
    if failed_before >= policy.retries:
        return DeadLetter(attempts=made)
    uniform = (rng or random).uniform
    return Retry(delay_s=uniform(0.0, policy.backoff_bound_s(failed_before)), attempts=made)
