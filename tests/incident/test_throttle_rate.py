"""A throttle keeps its rate at low rates over two workers: the measured start rate within ±10 % of the
set rate, and never more than the rate plus one start in any one-second window.

Ten seconds of backlog at 2/s and at 4/s (the one-token bucket gave 1.15/s and 2.43/s there), on one
server here and over three partitions of the cluster (tests/cluster/test_incident_cluster.py). The start
times are the handlers' (``tests.incident.kinds_incident``); the figures are printed (pytest -s).
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

import opslib
from benchmarks.fixtures import rate_and_peak
from tests.helpers import Workers, wait_for
from tests.incident.helpers import KINDS, enqueue_jobs, runs, starts, wait_runs

SECONDS = 10


def keeps_a_low_rate(client: Any, pool: Workers, prefix: str, rate: int, partitions: int = 1) -> None:
    """Two workers, a throttle at ``rate``, then ``SECONDS`` of backlog: the rate and the one-second peak hold."""
    at = {"client": client, "prefix": prefix}
    procs = [pool.start(KINDS, QUEUE_PARTITIONS=str(partitions)) for _ in range(2)]
    # The workers declare alpha (so it is known) and record the partition count (so opslib follows it).
    wait_for(lambda: "alpha" in opslib.kinds(**at).index, 30, "the workers to declare their kinds")
    opslib.throttle("alpha", rate, reason="a provider's limit", **at)
    for proc in procs:
        wait_for(lambda p=proc: f"Throttles now: alpha {rate}/s" in pool.log(p), 5, "the workers to see it")
    jobs = rate * SECONDS + 1
    enqueue_jobs(client, prefix, "alpha", jobs, partitions)
    wait_runs(client, prefix, "alpha", jobs, timeout_s=SECONDS * 2 + 30)
    measured, peak = rate_and_peak(starts(client, prefix, "alpha"))
    where = f"{partitions} partition{'s' if partitions > 1 else ''}"
    print(f"\nthrottle {rate}/s, 2 workers, {where}: {measured:.3f}/s over {jobs} jobs, at most {peak} in a second")
    assert abs(measured - rate) <= 0.1 * rate, f"start rate {measured:.3f}/s is not within 10 % of {rate}/s"
    assert peak <= rate + 1, f"{peak} jobs started within one second at {rate}/s"
    assert set(runs(client, prefix, "alpha").values()) == {1}, "a job ran twice"
    assert opslib.queue_stats(**at).dead == 0


@pytest.mark.parametrize("rate", [2, 4])
def test_two_workers_keep_a_low_rate(r: redis.Redis, workers: Workers, prefix: str, rate: int) -> None:
    keeps_a_low_rate(r, workers, prefix, rate)
