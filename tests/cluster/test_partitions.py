"""QUEUE_PARTITIONS=3 on a 3-primary cluster: jobs spread over the primaries by job id; opslib reads
and replays every partition into one frame; the scheduler's ticks stay exactly once; a count that
differs from the queue's, or a prefix that would pull the partitions into one slot, is refused."""

from __future__ import annotations

import asyncio
import collections
import os
import subprocess
import sys

import redis.asyncio.cluster as aiocluster
import redis.cluster

import opslib
import worker
from tests.helpers import ROOT
from tests.opslib.helpers import bury
from worker.embedded.cluster import LocalCluster
from worker.loop.scheduler import Scheduler
from worker.schedules import Schedule
from worker.store.keys import Keys, partition_of, queue_partitions

PARTS = 3


def run_worker_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "WORKER_KINDS": "tests.cluster.kinds_cluster", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_jobs_spread_over_the_three_primaries_by_job_id(cr: redis.cluster.RedisCluster, plain_prefix: str) -> None:
    parts = queue_partitions(plain_prefix, PARTS)
    owners = {cr.get_node_from_key(p.jobs).port for p in parts}
    assert len(owners) == PARTS, "each partition on a primary of its own"
    cr.set(parts[0].partitions, PARTS)  # as the first worker records it
    for i in range(300):
        worker.enqueue(cr, "noop", {"job_id": f"job{i}"}, prefix=plain_prefix, partitions=PARTS)
    for i in range(30):
        worker.enqueue(cr, "noop", {"job_id": f"later{i}"}, delay_s=60, prefix=plain_prefix, partitions=PARTS)
    lengths = [cr.xlen(p.jobs) for p in parts]
    assert sum(lengths) == 300 and min(lengths) > 50, lengths
    for p in parts:
        for _entry_id, fields in cr.xrange(p.jobs):
            assert partition_of(fields[b"job_id"].decode(), PARTS) == p.partition
    delayed = opslib.delayed(client=cr, prefix=plain_prefix)
    assert len(delayed) == 30
    assert all(partition_of(j, PARTS) == p for j, p in zip(delayed["job_id"], delayed["partition"], strict=True))


def test_opslib_reads_and_replays_every_partition(cr: redis.cluster.RedisCluster, plain_prefix: str) -> None:
    parts = queue_partitions(plain_prefix, PARTS)
    cr.set(parts[0].partitions, PARTS)  # as the workers record it
    for p in parts:
        for n in range(2):
            fields = {"kind": "doomed", "job_id": f"p{p.partition}n{n}", "attempts": "0", "seat": f"{p.partition}"}
            bury(cr, p, fields, {"error": "ValueError: seat is doomed", "reason": "exhausted"})  # type: ignore[arg-type]
    at = {"client": cr, "prefix": plain_prefix}
    dead = opslib.dead_letters(**at)
    assert len(dead) == 6
    assert sorted(dead["partition"]) == [0, 0, 1, 1, 2, 2]
    assert list(dead["dead_at"]) == sorted(dead["dead_at"])
    assert opslib.queue_stats(**at).dead == 6
    [group] = opslib.failure_groups(dead).itertuples()
    assert group.count == 6

    plan = opslib.replay(dead, dry_run=True, **at)
    assert list(plan["status"]) == ["would replay"] * 6
    first = opslib.replay(dead.index[:1].tolist(), **at)  # a bare id: looked for in every partition
    assert list(first["status"]) == ["replayed"] and first["partition"].iat[0] == dead["partition"].iat[0]
    done = opslib.replay_kind("doomed", **at)
    assert list(done["status"]) == ["replayed"] * 5
    for p in parts:
        assert cr.xlen(p.dead) == 0
        replayed = [f[b"job_id"].decode() for _id, f in cr.xrange(p.jobs) if b"replay_of" in f]
        assert sorted(replayed) == [f"p{p.partition}n0", f"p{p.partition}n1"]  # back in its own partition
    status = opslib.replay_status(done.attrs["batch"], **at)
    assert sorted(status["partition"]) == sorted(done["partition"])
    assert set(status["status"]) == {"still queued"}


def test_each_tick_is_enqueued_once_into_one_partition(cluster: LocalCluster, plain_prefix: str) -> None:
    s = Schedule("tick", "noop", every_s=1)
    parts = queue_partitions(plain_prefix, PARTS)

    async def simulate() -> None:
        client = aiocluster.RedisCluster.from_url(cluster.url)
        now = [1_800_000_000.0]
        try:
            workers = [
                Scheduler(client, parts, [s], owner=f"w{i}", clock=lambda i=i: now[0] + i * 0.3) for i in range(3)
            ]
            for _ in range(60):
                now[0] += 1.0
                for w in workers:
                    await w.wake()
        finally:
            await client.aclose()

    asyncio.run(simulate())
    sync = redis.cluster.RedisCluster.from_url(cluster.url)
    per_tick: collections.Counter[str] = collections.Counter()
    for p in parts:
        for _entry_id, fields in sync.xrange(p.jobs):
            per_tick[fields[b"scheduled_for"].decode()] += 1
    sync.close()
    assert len(per_tick) >= 60 and set(per_tick.values()) == {1}, per_tick
    spread = {p.partition for p in parts if sync_len(cluster, p.jobs)}
    assert spread == {0, 1, 2}, "the ticks go to every partition"


def sync_len(cluster: LocalCluster, key: str) -> int:
    with redis.cluster.RedisCluster.from_url(cluster.url) as client:
        return int(client.xlen(key))


def test_a_count_that_differs_from_the_queues_is_refused(cluster: LocalCluster, plain_prefix: str) -> None:
    env = {"REDIS_URL": cluster.url, "QUEUE_PREFIX": plain_prefix, "QUEUE_PARTITIONS": "3"}
    with redis.cluster.RedisCluster.from_url(cluster.url) as client:
        client.set(Keys(plain_prefix).partitions, 2)
    for command in (("enqueue", "noop"), ("health",)):
        done = run_worker_cli(*command, env=env)
        if command == ("health",):
            continue  # health reads the recorded count, whatever its own setting
        assert done.returncode == 2
        [line] = done.stderr.strip().splitlines()
        assert f"has QUEUE_PARTITIONS=2 (recorded in {plain_prefix}partitions)" in line
        assert "this process has QUEUE_PARTITIONS=3" in line


def test_a_prefix_with_a_hash_tag_and_partitions_is_refused(cluster: LocalCluster) -> None:
    env = {"REDIS_URL": cluster.url, "QUEUE_PREFIX": "{stagedoor}:", "QUEUE_PARTITIONS": "3"}
    for command in (("enqueue", "noop"), ("keys",)):
        done = run_worker_cli(*command, env=env)
        assert done.returncode == 2
        [line] = done.stderr.strip().splitlines()
        assert "holds a hash tag, which would put all 3 partitions in one slot" in line
