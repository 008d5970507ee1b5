"""The queue on a 3-primary cluster: retries, delayed jobs, dead letters, poison, replay, the
scheduler with three workers, and opslib's frames and CLI, each pointed at some node of the cluster."""

from __future__ import annotations

import collections
import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import redis.cluster

import opslib
import worker
from tests.cluster.test_cluster_mode import KINDS, assert_clean
from tests.helpers import ROOT, Workers, wait_for
from worker.store.keys import Keys


def opslib_cli(*args: str, url: str, prefix: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "opslib", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "REDIS_URL": url, "QUEUE_PREFIX": prefix, **extra},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_retries_delays_dead_letters_and_replay(
    cr: redis.cluster.RedisCluster, tagged_prefix: str, cluster_workers: Workers, node_urls: list[str]
) -> None:
    keys = Keys(tagged_prefix)
    at = {"client": cr, "prefix": tagged_prefix}
    for i in range(3):
        worker.enqueue(cr, "flaky", {"order_id": f"f{i}"}, prefix=tagged_prefix)
        worker.enqueue(cr, "doomed", {"order_id": f"d{i}"}, prefix=tagged_prefix)
        worker.enqueue(cr, "noop", {"order_id": f"later{i}"}, delay_s=0.3, prefix=tagged_prefix)
    assert len(opslib.delayed(**at)) == 3
    assert_clean(cluster_workers.burst(KINDS).stdout)
    assert cr.scard(f"{tagged_prefix}test:done") == 6
    dead = opslib.dead_letters(**at)
    assert sorted(dead["order_id"]) == ["d0", "d1", "d2"]
    assert set(dead["reason"]) == {"exhausted"} and set(dead["attempts"]) == {2}
    assert set(dead["partition"]) == {0}
    groups = opslib.failure_groups(dead)
    assert groups["count"].sum() == 3 and set(groups["error_type"]) == {"ValueError"}

    stats = opslib_cli("stats", url=node_urls[-1], prefix=tagged_prefix)
    assert stats.returncode == 0, stats.stderr
    assert_clean(stats.stdout + stats.stderr)
    listed = opslib_cli("dead", "--kind", "doomed", "--json", url=node_urls[1], prefix=tagged_prefix)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count('"doomed"') == 3

    done = opslib.replay_kind("doomed", **at)
    assert list(done["status"]) == ["replayed"] * 3
    assert cr.xlen(keys.dead) == 0
    assert_clean(cluster_workers.burst(KINDS).stdout)
    status = opslib.replay_status(done.attrs["batch"], wait_s=30, **at)
    assert list(status["status"]) == ["failed again"] * 3


def test_an_entry_that_kills_its_worker_becomes_poison(
    cr: redis.cluster.RedisCluster, tagged_prefix: str, cluster_workers: Workers
) -> None:
    worker.enqueue(cr, "crash", {"order_id": "boom"}, prefix=tagged_prefix)
    fast = {"RECLAIM_IDLE_MS": "200", "RECLAIM_INTERVAL_S": "0.1", "MAX_DELIVERIES": "2"}
    for _ in range(6):
        proc = cluster_workers.start(KINDS, "--burst", **fast)
        proc.wait(60)
        if cr.xlen(Keys(tagged_prefix).dead):
            break
    [row] = opslib.dead_letters(client=cr, prefix=tagged_prefix).itertuples()
    assert row.reason == "poison" and row.kind == "crash"
    assert int(cr.get(f"{tagged_prefix}test:crashes:{row.job_id}")) == 2
    for proc in cluster_workers.procs:
        assert_clean(cluster_workers.log(proc))


def tickers_on_every_node(pool: Workers, node_urls: list[str], ticks: Path, **env: str) -> collections.Counter[str]:
    """One ticking worker per node (each given that node's URL) until four ticks ran, then stopped
    cleanly: how many times each tick was enqueued and run."""
    procs = []
    for i, url in enumerate(node_urls):
        pool.redis_url = url
        procs.append(pool.start("tests.scheduler.kinds_ticks", WORKER_NAME=f"ticker-{i}", TICK_LOG=str(ticks), **env))

    def seen() -> collections.Counter[str]:
        lines = ticks.read_text().splitlines() if ticks.exists() else []
        return collections.Counter(line.split()[0] for line in lines)

    wait_for(lambda: len(seen()) >= 4, timeout_s=60, what="four ticks to run")
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(30) == 0
        assert_clean(pool.log(proc))
    return seen()


def test_three_workers_enqueue_each_tick_once(cluster_workers: Workers, tmp_path: Path, node_urls: list[str]) -> None:
    counts = tickers_on_every_node(cluster_workers, node_urls, tmp_path / "ticks.log")
    assert set(counts.values()) == {1}, counts
    stamps = sorted(time.mktime(time.strptime(t[:19], "%Y-%m-%dT%H:%M:%S")) for t in counts)
    assert all(b - a == 1 for a, b in itertools.pairwise(stamps)), stamps
