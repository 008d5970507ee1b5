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
        decision = decide(EMAIL, failed_before, ValueError, rng)
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
    outcomes = [decide(EMAIL, n, ValueError, rng) for n in range(6)]
    assert all(isinstance(o, Retry) for o in outcomes[:5])
    assert outcomes[5] == DeadLetter(attempts=6)


def test_render_policy_retries_once_and_dead_letters_with_attempts_two() -> None:
    assert isinstance(decide(RENDER, 0, ValueError), Retry)
    assert decide(RENDER, 1, ValueError) == DeadLetter(attempts=2)


def test_no_retry_policy_dead_letters_after_first_failure() -> None:
    assert decide(RECONCILE, 0, ValueError) == DeadLetter(attempts=1)


def test_attempts_beyond_the_policy_still_dead_letter() -> None:
    """A replayed or hand-edited job with a large attempts count is not retried again."""
    assert decide(RENDER, 7, ValueError) == DeadLetter(attempts=8)


@pytest.mark.parametrize("kwargs", [{"retries": -1}, {"base_s": 0}, {"base_s": 2.0, "cap_s": 1.0}, {"base_s": -1.0}])
def test_invalid_policies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


class Refused(Exception):
    """Stands for a permanent error (a mail provider's 4xx)."""


class RefusedForGood(Refused):
    """A subclass of a listed error is given up on too."""


class Unavailable(Exception):
    """Stands for an error that passes (a 503)."""


GIVES_UP = RetryPolicy(retries=5, base_s=1.0, cap_s=60.0, give_up_on=(Refused, KeyError))
GIVES_UP_NO_RETRIES = RetryPolicy(retries=0, give_up_on=(Refused,))


@pytest.mark.parametrize("failed_before", [0, 1, 2, 3, 4, 5, 6, 100])
@pytest.mark.parametrize("exc_type", [Refused, RefusedForGood, KeyError])
def test_a_listed_error_dead_letters_at_once_as_permanent_whatever_retries_remain(
    failed_before: int, exc_type: type[BaseException]
) -> None:
    assert decide(GIVES_UP, failed_before, exc_type, random.Random(3)) == DeadLetter(
        attempts=failed_before + 1, reason="permanent"
    )


@pytest.mark.parametrize("exc_type", [Unavailable, ValueError, LookupError, Exception, SystemExit, TimeoutError])
def test_an_unlisted_error_follows_the_retries_then_is_exhausted(exc_type: type[BaseException]) -> None:
    """LookupError is KeyError's base class: listing a subclass does not give up on its parents."""
    rng = random.Random(5)
    outcomes = [decide(GIVES_UP, n, exc_type, rng) for n in range(7)]
    assert all(isinstance(o, Retry) and o.attempts == n + 1 for n, o in enumerate(outcomes[:5]))
    assert outcomes[5] == DeadLetter(attempts=6, reason="exhausted")
    assert outcomes[6] == DeadLetter(attempts=7, reason="exhausted")


@pytest.mark.parametrize(("exc_type", "reason"), [(Refused, "permanent"), (Unavailable, "exhausted")])
def test_without_retries_the_reason_still_tells_permanent_from_exhausted(
    exc_type: type[BaseException], reason: str
) -> None:
    assert decide(GIVES_UP_NO_RETRIES, 0, exc_type) == DeadLetter(attempts=1, reason=reason)


def test_a_policy_without_give_up_on_never_says_permanent() -> None:
    for exc_type in (Refused, KeyError, Exception, BaseException):
        assert decide(RENDER, 1, exc_type) == DeadLetter(attempts=2, reason="exhausted")
        assert isinstance(decide(RENDER, 0, exc_type, random.Random(1)), Retry)


def test_a_permanent_decision_draws_no_random_number() -> None:
    """The decision stays pure: a permanent error consumes nothing of the generator."""
    rng, fresh = random.Random(11), random.Random(11)
    decide(GIVES_UP, 0, Refused, rng)
    assert rng.random() == fresh.random()


def test_give_up_on_takes_one_class_or_any_iterable_of_them_and_keeps_a_tuple() -> None:
    assert RetryPolicy(give_up_on=Refused).give_up_on == (Refused,)  # type: ignore[arg-type]
    assert RetryPolicy(give_up_on=[Refused, KeyError]).give_up_on == (Refused, KeyError)  # type: ignore[arg-type]
    assert RetryPolicy().give_up_on == ()
    assert hash(GIVES_UP) == hash(RetryPolicy(retries=5, base_s=1.0, cap_s=60.0, give_up_on=(Refused, KeyError)))


@pytest.mark.parametrize("give_up_on", [("Refused",), (Refused, 3), (Refused(),), (int,)])
def test_give_up_on_refuses_anything_but_exception_classes(give_up_on: tuple[object, ...]) -> None:
    with pytest.raises(ValueError, match="give_up_on must list exception classes"):
        RetryPolicy(give_up_on=give_up_on)  # type: ignore[arg-type]
