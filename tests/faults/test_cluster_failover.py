"""SIGKILL the Redis Cluster primary that owns the queue in the middle of 10,000 jobs.

A cluster of 3 primaries with a replica each; two workers pointed at a node
that survives. The primary holding the queue is killed once a fifth of the
jobs ran; its replica is promoted within a few seconds; the workers log the
loss, follow the new primary and finish. Every job completes. What Redis's
asynchronous replication may cost is measured and printed: jobs run twice
(acknowledgements the dead primary never passed on) and acknowledged
enqueues lost (none here: every job was enqueued, and replicated, before the
kill). Runs are counted in a file, not in Redis, so the kill cannot erase them.
"""

from __future__ import annotations

import collections
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.cluster

from tests.helpers import Workers, wait_for
from worker.embedded_cluster import LocalCluster, local_cluster
from worker.enqueue import job_fields
from worker.keys import Keys

JOBS = 10_000
PREFIX = "{failover}:"
KINDS = "tests.faults.failover_kinds"


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[LocalCluster]:
    """3 primaries, each with a replica; a killed primary's replica takes over after about 2 s."""
    with local_cluster(tmp_path / "cluster", primaries=3, replicas=True) as formed:
        yield formed


def runs(path: Path) -> collections.Counter[str]:
    return collections.Counter(path.read_text().split()) if path.exists() else collections.Counter()


def test_a_primary_killed_mid_run_is_followed_to_its_replica(replicated: LocalCluster, tmp_path: Path) -> None:
    client = redis.cluster.RedisCluster.from_url(replicated.url)
    keys = Keys(PREFIX)
    owner = client.get_node_from_key(keys.jobs)
    victim = next(n for n in replicated.primaries if n.port == owner.port)
    survivor_url = next(f"redis://127.0.0.1:{n.port}/0" for n in replicated.primaries if n is not victim)
    ran_file = tmp_path / "runs.txt"
    pool = Workers(survivor_url, PREFIX, tmp_path)
    fast = {"RECLAIM_IDLE_MS": "2000", "RECLAIM_INTERVAL_S": "0.5", "FAILOVER_RUNS_FILE": str(ran_file)}
    try:
        procs = [pool.start(KINDS, WORKER_NAME=f"failover-{i}", **fast) for i in range(2)]
        wait_for(
            lambda: client.exists(keys.heartbeat("failover-0"), keys.heartbeat("failover-1")) == 2,
            timeout_s=60,
            what="both workers to start",
        )
        job_ids = [f"j{i}" for i in range(JOBS)]
        for low in range(0, JOBS, 1000):
            pipe = client.pipeline(transaction=False)
            for job_id in job_ids[low : low + 1000]:
                pipe.xadd(keys.jobs, job_fields("record_run", {"job_id": job_id}))
            pipe.execute()
        wait_for(lambda: sum(runs(ran_file).values()) >= JOBS // 5, timeout_s=120, what="a fifth of the jobs")
        victim.server.process.send_signal(signal.SIGKILL)
        victim.server.process.wait(10)
        killed_at = time.monotonic()
        done_at_kill = sum(runs(ran_file).values())
        wait_for(
            lambda: sum(runs(ran_file).values()) > done_at_kill + 100,
            timeout_s=60,
            what="jobs to run again after the failover",
        )
        recovered_s = time.monotonic() - killed_at
        wait_for(lambda: len(runs(ran_file)) == JOBS, timeout_s=120, what="every job to run")
        all_done_s = time.monotonic() - killed_at
        counts = runs(ran_file)
        lost = JOBS - len(counts)
        twice = sum(1 for n in counts.values() if n > 1)
        assert lost == 0
        assert set(counts) == set(job_ids)
        logs = [pool.log(p) for p in procs]
        for text in logs:
            assert "Lost the connection to Redis" in text, text
            assert "Reconnected to Redis (node 127.0.0.1:" in text, "\n\n".join(logs)
            assert "Traceback" not in text and "CROSSSLOT" not in text, text
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            assert proc.wait(30) == 0
    finally:
        pool.stop_all()
        client.close()
    print(
        f"\nfailover figures: primary killed after {done_at_kill} of {JOBS} jobs; jobs ran again "
        f"{recovered_s:.1f} s later; all {JOBS} done {all_done_s:.1f} s after the kill; "
        f"lost {lost}; run twice {twice}"
    )
