"""Throttle a kind under real workers: the start rate over all workers holds, and a lift lets the rest run.

Two workers share one token bucket per kind: at 40/s the measured start rate
over 8 s lies within 30-50/s; lifted, the rest finish at full speed, each job
exactly once. The figures are printed (pytest -s) for the docs.
"""

from __future__ import annotations

import time

import redis

import opslib
from tests.helpers import Workers, wait_for
from tests.incident.helpers import KINDS, enqueue_jobs, runs, starts, wait_runs

JOBS = 1500
RATE = 40
WINDOW_S = 8.0


def test_a_throttle_of_40_a_second_over_two_workers_then_lifted(r: redis.Redis, workers: Workers, prefix: str) -> None:
    at = {"client": r, "prefix": prefix}
    enqueue_jobs(r, prefix, "alpha", JOBS)
    opslib.throttle("alpha", RATE, reason="provider asks for 40/s", by="ana", **at)
    assert opslib.kinds(**at).loc["alpha", "throttle_per_s"] == RATE
    workers.start(KINDS)
    workers.start(KINDS)
    first = wait_for(lambda: starts(r, prefix, "alpha"), 30, "the first alpha job")[0]  # type: ignore[index]
    wait_for(lambda: time.time() > first + WINDOW_S + 0.5, WINDOW_S + 5, "the window to pass")
    started = starts(r, prefix, "alpha")
    in_window = [t for t in started if first <= t < first + WINDOW_S]
    rate = len(in_window) / WINDOW_S
    fives = [sum(1 for t in started if s <= t < s + 5) / 5 for s in (first, first + 1.5, first + 3)]
    print(
        f"\nthrottle {RATE}/s: {rate:.1f}/s over {WINDOW_S:.0f} s; 5-s windows {', '.join(f'{f:.1f}' for f in fives)}/s"
    )
    assert 30 <= rate <= 50, f"start rate {rate:.1f}/s over {WINDOW_S} s is outside 30-50/s"
    assert len(started) < JOBS / 2

    lifted = time.time()
    opslib.throttle("alpha", None, by="ana", **at)
    wait_runs(r, prefix, "alpha", JOBS, timeout_s=60)
    rest = JOBS - len(started)
    took = max(starts(r, prefix, "alpha")) - lifted
    print(f"lifted: the other {rest} jobs started within {took:.2f} s ({rest / took:.0f}/s)")
    assert rest / took > 3 * RATE, "after the lift the rest ran at the throttled rate"
    assert set(runs(r, prefix, "alpha").values()) == {1}
    assert opslib.queue_stats(**at).dead == 0
    assert list(opslib.actions(kind="alpha", **at)["action"]) == ["throttle", "throttle"]
