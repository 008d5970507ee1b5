"""Workers consuming QUEUE_PARTITIONS=3, on the 3-primary cluster and on one plain server.

Real worker processes run the jobs: enqueue, retries, delayed jobs, dead
letters (archived with their partition), poison, replay and discard by the
``dead_letters()`` rows, three workers' ticks, opslib's frames and CLI, and a
busy partition that must not starve another.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import psycopg
import pytest
import redis
import redis.cluster

import opslib
import worker
from tests.cluster.test_cluster_mode import KINDS, assert_clean
from tests.cluster.test_cluster_queue import opslib_cli, tickers_on_every_node
from tests.helpers import Workers, wait_for
from worker.store.keys import Keys, partition_of, queue_partitions

PARTS = 3
ENV = {"QUEUE_PARTITIONS": str(PARTS)}


def test_the_whole_life_of_jobs_over_three_partitions_on_three_primaries(
    cr: redis.cluster.RedisCluster, plain_prefix: str, tmp_path: Path, node_urls: list[str], archive_url: str
) -> None:
    parts = queue_partitions(plain_prefix, PARTS)
    assert len({cr.get_node_from_key(p.jobs).port for p in parts}) == PARTS
    enqueue = {"prefix": plain_prefix, "partitions": PARTS}
    for i in range(30):
        worker.enqueue(cr, "noop", {"job_id": f"n{i}"}, **enqueue)
    for i in range(6):
        worker.enqueue(cr, "flaky", {"job_id": f"f{i}"}, **enqueue)
        worker.enqueue(cr, "doomed", {"job_id": f"d{i}", "order_id": f"d{i}"}, **enqueue)
        worker.enqueue(cr, "noop", {"job_id": f"later{i}"}, delay_s=0.3, **enqueue)
    assert all(cr.xlen(p.jobs) for p in parts), "jobs land on every primary"
    pool = Workers(node_urls[1], plain_prefix, tmp_path)
    try:
        assert_clean(pool.burst(KINDS, **ENV).stdout)
        done = {member.decode() for member in cr.smembers(f"{plain_prefix}test:done")}
        assert done == {f"n{i}" for i in range(30)} | {f"f{i}" for i in range(6)} | {f"later{i}" for i in range(6)}

        at = {"client": cr, "prefix": plain_prefix}
        dead = opslib.dead_letters(**at)
        assert sorted(dead["job_id"]) == [f"d{i}" for i in range(6)]
        assert all(partition_of(j, PARTS) == p for j, p in zip(dead["job_id"], dead["partition"], strict=True))
        assert set(dead["reason"]) == {"exhausted"} and set(dead["attempts"]) == {2}
        stats = opslib.queue_stats(**at)
        assert (stats.dead, stats.pending, stats.delayed) == (6, 0, 0)
        totals = opslib.throughput(since="15min", **at).groupby("kind")[["succeeded", "dead"]].sum()
        assert totals.loc["noop", "succeeded"] == 36 and totals.loc["doomed", "dead"] == 6
        found = opslib.find("d0", **at)  # dead; its attempts' entries may still be on jobs, acknowledged
        assert found[found["where"] == "dead"]["job_id"].tolist() == ["d0"] and set(found["where"]) <= {
            "dead",
            "finished",
        }
        homes = dict(zip(dead["job_id"], dead["partition"], strict=True))
        wait_for(lambda: archived(archive_url, plain_prefix) == homes, what="the dead letters in the archive")

        # No QUEUE_PARTITIONS here: opslib follows the count the workers recorded on the queue.
        listed = opslib_cli("dead", "--kind", "doomed", "--json", url=node_urls[2], prefix=plain_prefix)
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.count('"doomed"') == 6 and '"partition"' in listed.stdout

        replayed = opslib.replay(dead.iloc[:3], **at)
        assert list(replayed["status"]) == ["replayed"] * 3
        assert list(replayed["partition"]) == list(dead["partition"].iloc[:3])
        discarded = opslib.discard(dead.iloc[3:], reason="orders refunded", **at)
        assert list(discarded["status"]) == ["discarded"] * 3
        assert list(discarded["partition"]) == list(dead["partition"].iloc[3:])
        assert sum(cr.xlen(p.dead) for p in parts) == 0

        assert_clean(pool.burst(KINDS, **ENV).stdout)
        status = opslib.replay_status(replayed.attrs["batch"], wait_s=30, **at)
        assert list(status["status"]) == ["failed again"] * 3
        assert sorted(status["partition"]) == sorted(replayed["partition"])
        again = opslib.dead_letters(**at)
        assert sorted(again["replay_of"]) == sorted(dead.index[:3])
        for proc in pool.procs:
            assert_clean(pool.log(proc))
    finally:
        pool.stop_all()


def archived(archive_url: str, prefix: str) -> dict[str, int]:
    """job_id -> partition of the queue's rows in the archive."""
    with psycopg.connect(archive_url, autocommit=True) as conn:
        found = conn.execute("SELECT to_regclass('dead_letters') IS NOT NULL").fetchone()
        if not found or not found[0]:
            return {}
        rows = conn.execute("SELECT job_id, partition FROM dead_letters WHERE queue = %s", (prefix,)).fetchall()
    return {job_id: int(partition) for job_id, partition in rows}


def test_poison_in_a_partition_is_dead_lettered_there(
    cr: redis.cluster.RedisCluster, plain_prefix: str, tmp_path: Path, cluster: object
) -> None:
    parts = queue_partitions(plain_prefix, PARTS)
    job_id = "boom"
    worker.enqueue(cr, "crash", {"job_id": job_id}, prefix=plain_prefix, partitions=PARTS)
    pool = Workers(cluster.url, plain_prefix, tmp_path)  # type: ignore[attr-defined]
    fast = {"RECLAIM_IDLE_MS": "200", "RECLAIM_INTERVAL_S": "0.1", "MAX_DELIVERIES": "2", **ENV}
    try:
        for _ in range(6):
            pool.start(KINDS, "--burst", **fast).wait(60)
            if any(cr.xlen(p.dead) for p in parts):
                break
        home = parts[partition_of(job_id, PARTS)]
        [row] = opslib.dead_letters(client=cr, prefix=plain_prefix).itertuples()
        assert row.reason == "poison" and row.partition == home.partition and cr.xlen(home.dead) == 1
        assert int(cr.get(f"{plain_prefix}test:crashes:{job_id}")) == 2
        for proc in pool.procs:
            assert_clean(pool.log(proc))
    finally:
        pool.stop_all()


def test_three_partitioned_workers_enqueue_each_tick_once(
    cluster: object, plain_prefix: str, tmp_path: Path, node_urls: list[str]
) -> None:
    pool = Workers(node_urls[0], plain_prefix, tmp_path)
    try:
        counts = tickers_on_every_node(pool, node_urls, tmp_path / "ticks.log", **ENV)
        assert set(counts.values()) == {1}, counts
    finally:
        pool.stop_all()


# --- one plain server, three partitions ------------------------------------------------------------


@pytest.fixture
def single(redis_url: str, prefix: str, tmp_path: Path) -> Workers:
    return Workers(redis_url, prefix, tmp_path)


def test_a_plain_server_serves_three_partitions(r: redis.Redis, prefix: str, single: Workers) -> None:
    parts = queue_partitions(prefix, PARTS)
    for i in range(60):
        worker.enqueue(r, "noop", {"job_id": f"n{i}"}, prefix=prefix, partitions=PARTS)
    for i in range(3):
        worker.enqueue(r, "flaky", {"job_id": f"f{i}"}, prefix=prefix, partitions=PARTS)
        worker.enqueue(r, "doomed", {"job_id": f"d{i}"}, prefix=prefix, partitions=PARTS)
    assert all(r.xlen(p.jobs) for p in parts)
    try:
        out = single.burst(KINDS, **ENV).stdout
        assert "Traceback" not in out
        assert r.scard(f"{prefix}test:done") == 63
        dead = opslib.dead_letters(client=r, prefix=prefix)
        assert sorted(dead["job_id"]) == ["d0", "d1", "d2"]
        assert sum(r.xlen(p.dead) for p in parts) == 3
        assert r.get(Keys(prefix).partitions) == b"3"
        for p in parts:  # everything acknowledged, in every partition
            assert r.xpending(p.jobs, "workers")["pending"] == 0
    finally:
        single.stop_all()


def test_a_busy_partition_does_not_starve_another(r: redis.Redis, prefix: str, single: Workers) -> None:
    parts = queue_partitions(prefix, PARTS)
    busy = [f"b{i}" for i in range(20_000) if partition_of(f"b{i}", PARTS) == 0][:2000]
    pipe = r.pipeline(transaction=False)
    for job_id in busy:
        pipe.xadd(parts[0].jobs, {"kind": "slow", "job_id": job_id, "attempts": "0"})
    pipe.execute()
    proc = single.start(KINDS, **ENV)
    try:
        wait_for(lambda: r.scard(f"{prefix}test:done") >= 100, timeout_s=60, what="the busy partition to run")
        lone = next(f"l{i}" for i in range(100) if partition_of(f"l{i}", PARTS) == 2)
        started = time.monotonic()
        worker.enqueue(r, "noop", {"job_id": lone}, prefix=prefix, partitions=PARTS)
        wait_for(lambda: r.sismember(f"{prefix}test:done", lone), timeout_s=30, what="the lone job to run")
        waited_s = time.monotonic() - started
        left = len(busy) - r.scard(f"{prefix}test:done") + 1
        assert left > 500, f"the lone job waited for the busy partition ({left} left, {waited_s:.2f} s)"
        assert waited_s < 1.0, waited_s
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert "Traceback" not in single.log(proc)
        single.stop_all()
