"""The retry decision is a pure function: exhaustive checks without Redis."""

from __future__ import annotations

import random

import pytest

from worker.retry import DeadLetter, Retry, RetryPolicy, decide

EMAIL = RetryPolicy(retries=5, base_s=1.0, cap_s=60.0)
RENDER = RetryPolicy(retries=1, base_s=1.0, cap_s=60.0)
RECONCILE = RetryPolicy(retries=0)


@pytest.mark.parametrize(
    ("failed_before", "bound"),
    [(0, 1.0), (1, 2.0), (2, 4.0), (3, 8.0), (4, 16.0), (5, 32.0), (6, 60.0), (7, 60.0), (100, 60.0), (10_000, 60.0)],
)
def test_backoff_bound_doubles_from_base_to_cap(failed_before: int, bound: float) -> None:
    assert EMAIL.backoff_bound_s(failed_before) == bound


@pytest.mark.parametrize("failed_before", range(5))
def test_full_jitter_stays_within_bound_and_uses_the_whole_range(failed_before: int) -> None:
    rng = random.Random(7)
    delays = []
    for _ in range(2000):
        decision = decide(EMAIL, failed_before, rng)
        assert isinstance(decision, Retry)
        assert decision.attempts == failed_before + 1
        delays.append(decision.delay_s)
    bound = EMAIL.backoff_bound_s(failed_before)
    assert all(0.0 <= d <= bound for d in delays)
    # full jitter: the delays spread over [0, bound], not bunched near it
    assert min(delays) < 0.05 * bound
    assert max(delays) > 0.95 * bound


def test_email_policy_makes_six_attempts_then_dead_letters() -> None:
    rng = random.Random(1)
    outcomes = [decide(EMAIL, n, rng) for n in range(6)]
    assert all(isinstance(o, Retry) for o in outcomes[:5])
    assert outcomes[5] == DeadLetter(attempts=6)


def test_render_policy_retries_once_and_dead_letters_with_attempts_two() -> None:
    assert isinstance(decide(RENDER, 0), Retry)
    assert decide(RENDER, 1) == DeadLetter(attempts=2)


def test_no_retry_policy_dead_letters_after_first_failure() -> None:
    assert decide(RECONCILE, 0) == DeadLetter(attempts=1)


def test_attempts_beyond_the_policy_still_dead_letter() -> None:
    """A replayed or hand-edited job with a large attempts count is not retried again."""
    assert decide(RENDER, 7) == DeadLetter(attempts=8)


@pytest.mark.parametrize("kwargs", [{"retries": -1}, {"base_s": 0}, {"base_s": 2.0, "cap_s": 1.0}, {"base_s": -1.0}])
def test_invalid_policies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
