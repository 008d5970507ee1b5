"""Unique keys and idempotent enqueue on the 3-primary cluster, QUEUE_PARTITIONS=3: a key's jobs and its
lock share the partition of the kind and key (one slot, one node), so every duplicate meets the lock
whatever job id it was minted; batches with duplicates go through a cluster pipeline; a worker settles
the job and releases the key."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import redis.asyncio.cluster as aiocluster
import redis.cluster

import worker
from tests.helpers import Workers
from worker.store.enqueue import NewJob, enqueue_many, enqueue_many_async
from worker.store.keys import partition_of, queue_partitions
from worker.store.unique import route_of

PARTS = 3
KINDS = "tests.queue.kinds_unique"


def test_duplicates_meet_one_lock_beside_their_partition(
    cr: redis.cluster.RedisCluster, plain_prefix: str, tmp_path: Path, node_urls: list[str]
) -> None:
    at = {"prefix": plain_prefix, "partitions": PARTS}
    parts = queue_partitions(plain_prefix, PARTS)
    refs: dict[str, set[str]] = {}
    for i in range(30):  # (entry ids of different partitions may be equal: counted per key)
        refs.setdefault(f"k{i % 5}", set()).add(worker.enqueue(cr, "unique_ok", {}, unique_key=f"k{i % 5}", **at))
    assert all(len(held) == 1 for held in refs.values()) and sum(cr.xlen(p.jobs) for p in parts) == 5
    for i in range(5):
        home = parts[partition_of(route_of({"kind": "unique_ok", "unique_key": f"k{i}"}), PARTS)]
        assert cr.exists(home.unique("unique_ok", f"k{i}"))
        assert cr.keyslot(home.unique("unique_ok", f"k{i}")) == cr.keyslot(home.jobs)
    batch = [NewJob("unique_ok", {}, job_id="same"), NewJob("unique_ok", {}, job_id="same", delay_s=60)]
    first, again = enqueue_many(cr, batch, **at)
    assert first == again
    assert sum(cr.xlen(p.jobs) for p in parts) == 6 and sum(cr.zcard(p.delayed) for p in parts) == 0

    async def more() -> list[str]:
        client = aiocluster.RedisCluster.from_url(f"{node_urls[0]}")
        try:
            return await enqueue_many_async(client, [NewJob("unique_ok", {}, unique_key="k0")] * 2, **at)
        finally:
            await client.aclose()

    assert len(set(asyncio.run(more()))) == 1 and sum(cr.xlen(p.jobs) for p in parts) == 6
    Workers(node_urls[1], plain_prefix, tmp_path).burst(KINDS, QUEUE_PARTITIONS=str(PARTS))
    assert cr.llen(f"{plain_prefix}test:runs") == 6
    assert not any(cr.exists(p.unique("unique_ok", f"k{i}")) for p in parts for i in range(5))
    assert worker.enqueue(cr, "unique_ok", {}, unique_key="k0", **at) not in refs["k0"]


def test_jobs_due_at_one_moment_keep_enqueue_order_in_each_partition(
    cr: redis.cluster.RedisCluster, plain_prefix: str, node_urls: list[str]
) -> None:
    """Alone (EVALSHA of ``enqueue_later`` on the cluster client), in a cluster pipeline (the script loaded
    first) and on the asyncio client: the jobs of each partition keep the order they were enqueued in."""
    at = {"prefix": plain_prefix, "partitions": PARTS}
    due = float(cr.time()[0] + 60)
    for n in range(0, 30, 3):
        worker.enqueue(cr, "unique_ok", {"n": n}, run_at=due, **at)
        enqueue_many(cr, [NewJob("unique_ok", {"n": n + 1}, run_at=due)], **at)

        async def one(n: int = n) -> None:
            client = aiocluster.RedisCluster.from_url(f"{node_urls[0]}")
            try:
                await enqueue_many_async(client, [NewJob("unique_ok", {"n": n + 2}, run_at=due)], **at)
            finally:
                await client.aclose()

        asyncio.run(one())
    seen = []
    for part in queue_partitions(plain_prefix, PARTS):
        members = cr.zrange(part.delayed, 0, -1, withscores=True)
        order = [int(json.loads(member)["n"]) for member, _ in members]
        assert order == sorted(order) and len({score for _, score in members}) == len(members)
        assert all(0 <= score - due < 1e-5 for _, score in members)
        seen += order
    assert sorted(seen) == list(range(30))
