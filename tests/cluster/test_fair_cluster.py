"""Fair keys on the 3-primary cluster: a queue in one slot (a tagged prefix) and one of three partitions,
each partition's fair keys in its own slot beside its ``jobs``."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import redis.cluster

import worker
from tests.helpers import Workers, wait_for
from tests.queue.test_fair import KINDS, SLOTS, jain
from worker.store.enqueue import NewJob
from worker.store.keys import Keys, queue_partitions
from worker.store.wire import text

PARTS = 3


def starts(cr: redis.cluster.RedisCluster, prefix: str) -> list[str]:
    return [text(t) for t in cr.lrange(f"{prefix}test:starts", 0, -1)]


def test_a_second_tenant_behind_20000_on_a_cluster(
    cr: redis.cluster.RedisCluster, tagged_prefix: str, cluster_workers: Workers
) -> None:
    keys = Keys(tagged_prefix)
    assert len({cr.keyslot(k) for k in keys.fair_scripts}) == 1
    for first in range(0, 20_000, 1000):  # a cluster pipeline: the script is loaded on the primaries first
        news = [NewJob("fair_start", {"tenant": "A"}, fair_key="A") for _ in range(first, first + 1000)]
        worker.enqueue_many(cr, news, prefix=tagged_prefix)
    cluster_workers.start(KINDS, WORKER_CONCURRENCY=str(SLOTS))
    wait_for(lambda: cr.llen(f"{tagged_prefix}test:starts") >= 200, what="the backlog starting")
    before = cr.llen(f"{tagged_prefix}test:starts")
    worker.enqueue(cr, "fair_start", {"tenant": "B"}, fair_key="B", prefix=tagged_prefix)
    wait_for(lambda: "B" in starts(cr, tagged_prefix), what="tenant B's job starting")
    behind = starts(cr, tagged_prefix).index("B") - before
    # Two slot-counts of dispatch plus starts under way not yet recorded when ``before`` was read (as in
    # tests/queue/test_fair.py).
    assert behind <= 3 * SLOTS, f"B started {behind} starts after it was enqueued"


def test_three_partitions_on_three_primaries_share_fairly_and_lose_nothing(
    cr: redis.cluster.RedisCluster, plain_prefix: str, tmp_path: Path, node_urls: list[str]
) -> None:
    parts = queue_partitions(plain_prefix, PARTS)
    assert len({cr.get_node_from_key(p.fair_queue).port for p in parts}) == PARTS
    tenants = [f"org-{t}" for t in range(20)]
    for tenant in tenants:
        news = [NewJob("fair_start", {"tenant": tenant}, fair_key=tenant) for _ in range(30)]
        worker.enqueue_many(cr, news, prefix=plain_prefix, partitions=PARTS)
    worker.enqueue(cr, "fair_start", {"tenant": "solo"}, fair_key="solo", prefix=plain_prefix, partitions=PARTS)
    pool = Workers(node_urls[1], plain_prefix, tmp_path)
    try:
        pool.burst(KINDS, QUEUE_PARTITIONS=str(PARTS), WORKER_CONCURRENCY=str(SLOTS))
    finally:
        pool.stop_all()
    order = starts(cr, plain_prefix)
    assert len(order) == 601 and cr.scard(f"{plain_prefix}test:done") == 601
    assert all(cr.zcard(p.fair_queue) == 0 for p in parts)
    first_half = Counter(order[:300])
    assert jain([first_half.get(t, 0) for t in tenants]) >= 0.95, first_half
