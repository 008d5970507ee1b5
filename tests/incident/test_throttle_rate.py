"""A throttle keeps its rate at low rates over two workers: the measured start rate within ±10 % of the
set rate, and never more than the rate plus one start in any one-second window.

Ten seconds of backlog at 2/s and at 4/s (today's bucket gave 1.15/s and 2.43/s there). The start
times are the handlers' (``tests.incident.kinds_incident``); the figures are printed (pytest -s).
"""

from __future__ import annotations

import pytest
import redis

import opslib
from tests.helpers import Workers
from tests.incident.helpers import KINDS, enqueue_jobs, rate_and_peak, runs, starts, wait_runs

SECONDS = 10


@pytest.mark.parametrize("rate", [2, 4])
def test_two_workers_keep_a_low_rate(r: redis.Redis, workers: Workers, prefix: str, rate: int) -> None:
    at = {"client": r, "prefix": prefix}
    jobs = rate * SECONDS + 1
    enqueue_jobs(r, prefix, "alpha", jobs)
    opslib.throttle("alpha", rate, reason="a provider's limit", **at)
    workers.start(KINDS)
    workers.start(KINDS)
    wait_runs(r, prefix, "alpha", jobs, timeout_s=SECONDS * 2 + 30)
    measured, peak = rate_and_peak(starts(r, prefix, "alpha"))
    print(f"\nthrottle {rate}/s over 2 workers: {measured:.3f}/s over {jobs} jobs, at most {peak} in a second")
    assert abs(measured - rate) <= 0.1 * rate, f"start rate {measured:.3f}/s is not within 10 % of {rate}/s"
    assert peak <= rate + 1, f"{peak} jobs started within one second at {rate}/s"
    assert set(runs(r, prefix, "alpha").values()) == {1}, "a job ran twice"
    assert opslib.queue_stats(**at).dead == 0
