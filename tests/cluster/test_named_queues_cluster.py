"""Named queues on the 3-primary cluster: three weighted queues of three partitions each (nine streams
over the primaries) keep their shares of starts, and a job of ``bulk`` retries, dies and is replayed
without leaving ``bulk``."""

from __future__ import annotations

from pathlib import Path

import redis.cluster

import opslib
import worker
from tests.cluster.conftest import LocalCluster
from tests.helpers import Workers
from tests.queue import kinds_queues  # noqa: F401 - declares q_bulk_fails in bulk for this process's enqueue
from tests.queue.helpers_queues import KINDS, SERVED, WEIGHTS, fill, longest_gap, lowest_window_share, shares, starts_of
from worker.store.keys import Keys, queue_partitions

PARTS = 3


def test_weighted_shares_hold_over_nine_streams_on_three_primaries(
    cr: redis.cluster.RedisCluster, cluster: LocalCluster, plain_prefix: str, tmp_path: Path
) -> None:
    bulk = queue_partitions(plain_prefix, PARTS, "bulk")
    assert len({cr.get_node_from_key(p.jobs).port for p in bulk}) == PARTS, "each queue spreads over the primaries"
    fill(cr, plain_prefix, {"critical": 2500, "default": 1500, "bulk": 800}, partitions=PARTS)
    pool = Workers(cluster.url, plain_prefix, tmp_path)
    env = {"WORKER_QUEUES": SERVED, "QUEUE_PARTITIONS": str(PARTS), "WORKER_CONCURRENCY": "12"}
    try:
        starts = starts_of(cr, plain_prefix, pool, 3000, **env)[:3000]
    finally:
        pool.stop_all()
    got = shares(starts)
    for queue, weight in WEIGHTS.items():
        assert abs(got[queue] - 10 * weight) <= 5, got
    assert lowest_window_share(starts, "bulk") >= 5, "bulk (weight 1 of 10) is never starved"
    assert longest_gap(starts, "bulk") < 500


def test_a_bulk_job_retries_dies_and_is_replayed_in_bulk_on_the_cluster(
    cr: redis.cluster.RedisCluster, cluster_workers: Workers, tagged_prefix: str
) -> None:
    worker.enqueue(cr, "q_bulk_fails", {"order_id": "o1"}, prefix=tagged_prefix)
    bulk, default = Keys(tagged_prefix, queue="bulk"), Keys(tagged_prefix)
    cluster_workers.burst(KINDS, WORKER_QUEUES="critical,default,bulk")
    assert cr.xlen(bulk.dead) == 1 and cr.xlen(default.dead) == 0
    dead = opslib.dead_letters(client=cr, prefix=tagged_prefix)
    assert dead["queue"].tolist() == ["bulk"]
    assert opslib.replay(dead, client=cr, prefix=tagged_prefix)["status"].tolist() == ["replayed"]
    assert cr.xlen(bulk.dead) == 0 and cr.xlen(default.jobs) == 0
    cluster_workers.burst(KINDS, WORKER_QUEUES="bulk")
    assert cr.xlen(bulk.dead) == 1 and cr.llen(f"{tagged_prefix}test:starts") == 4
