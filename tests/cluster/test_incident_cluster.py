"""The incident desk on the 3-primary cluster with QUEUE_PARTITIONS=3: pause mid-run, restart, resume;
a throttle whose one schedule holds for every partition, and keeps a low rate there.

Each partition keeps its own copy of a pause and its own parked jobs (in its
slot, beside its ``jobs``), so the park and unpark moves stay on one node.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis.cluster

import opslib
from tests.helpers import Workers, wait_for
from tests.incident.helpers import KINDS, enqueue_jobs, runs, starts, wait_runs
from tests.incident.test_pause import pause_mid_run
from tests.incident.test_throttle_rate import keeps_a_low_rate


def test_pause_over_three_partitions_on_the_cluster(
    cr: redis.cluster.RedisCluster, plain_prefix: str, tmp_path: Path, node_urls: list[str]
) -> None:
    pool = Workers(node_urls[0], plain_prefix, tmp_path)
    try:
        pause_mid_run(cr, pool, plain_prefix, 3, QUEUE_PARTITIONS="3")
    finally:
        pool.stop_all()


def test_a_throttle_holds_over_three_partitions_on_the_cluster(
    cr: redis.cluster.RedisCluster, plain_prefix: str, tmp_path: Path, node_urls: list[str]
) -> None:
    at = {"client": cr, "prefix": plain_prefix}
    pool = Workers(node_urls[1], plain_prefix, tmp_path)
    try:
        procs = [pool.start(KINDS, QUEUE_PARTITIONS="3") for _ in range(2)]
        # The workers declare alpha (so it is known) and record the partition count (so opslib follows it).
        wait_for(lambda: "alpha" in opslib.kinds(**at).index, 30, "the workers to declare their kinds")
        opslib.throttle("alpha", 20, reason="one bucket for the queue", **at)
        for proc in procs:  # honoured within a second: the jobs come once both workers hold it
            wait_for(lambda p=proc: "Throttles now: alpha 20/s" in pool.log(p), 5, "the workers to see the throttle")
        enqueue_jobs(cr, plain_prefix, "alpha", 400, 3)
        first = wait_for(lambda: starts(cr, plain_prefix, "alpha"), 30, "the first alpha job")[0]  # type: ignore[index]
        wait_for(lambda: time.time() > first + 5.5, 10, "the window to pass")
        rate = sum(1 for t in starts(cr, plain_prefix, "alpha") if first <= t < first + 5) / 5
        print(f"\nthrottle 20/s over 3 partitions on the cluster: {rate:.1f}/s over 5 s")
        assert 15 <= rate <= 25, f"start rate {rate:.1f}/s over 5 s is outside 15-25/s"
        opslib.throttle("alpha", None, **at)
        wait_runs(cr, plain_prefix, "alpha", 400)
        assert set(runs(cr, plain_prefix, "alpha").values()) == {1}
    finally:
        pool.stop_all()


@pytest.mark.parametrize("rate", [2, 4])
def test_a_low_rate_holds_over_three_partitions_on_the_cluster(
    cr: redis.cluster.RedisCluster, plain_prefix: str, tmp_path: Path, node_urls: list[str], rate: int
) -> None:
    pool = Workers(node_urls[2], plain_prefix, tmp_path)
    try:
        keeps_a_low_rate(cr, pool, plain_prefix, rate, partitions=3)
    finally:
        pool.stop_all()
