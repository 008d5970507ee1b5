"""The backlog gauge on a 3-primary cluster: each partition (its own hash tag, so its own primary)
equals the ground truth after XDEL, XTRIM, pause, delayed due, throttle and the fair feeder's moves, with
fair-key jobs waiting, on ``default`` and on ``bulk``, read through the cluster client as the metrics and
``python -m worker metrics`` read it."""

from __future__ import annotations

import pytest
import redis.cluster
from redis.crc import key_slot

from tests.queue import helpers_backlog as backlog_scenario
from worker.store.keys import queue_partitions


@pytest.mark.parametrize("queue", ["default", "bulk"])
def test_the_gauge_equals_the_ground_truth_on_every_partition(
    cr: redis.cluster.RedisCluster, plain_prefix: str, queue: str
) -> None:
    parts = queue_partitions(plain_prefix, 3, queue)
    nodes = {cr.get_node_from_key(keys.jobs).name for keys in parts}
    assert len(nodes) == 3, "each partition on a primary of its own"
    for keys in parts:
        names = (keys.jobs, keys.delayed, keys.throttled, keys.parked, keys.fair_queue)
        assert len({key_slot(k.encode()) for k in names}) == 1
        backlog_scenario.run(cr, keys)
