"""The incident desk on the 3-primary cluster with QUEUE_PARTITIONS=3: pause mid-run, restart, resume.

Each partition keeps its own copy of a pause and its own parked jobs (in its
slot, beside its ``jobs``), so the park and unpark moves stay on one node.
"""

from __future__ import annotations

from pathlib import Path

import redis.cluster

from tests.helpers import Workers
from tests.incident.test_pause import pause_mid_run


def test_pause_over_three_partitions_on_the_cluster(
    cr: redis.cluster.RedisCluster, plain_prefix: str, tmp_path: Path, node_urls: list[str]
) -> None:
    pool = Workers(node_urls[0], plain_prefix, tmp_path)
    try:
        pause_mid_run(cr, pool, plain_prefix, 3, QUEUE_PARTITIONS="3")
    finally:
        pool.stop_all()
