"""Cancel on the 3-primary cluster with QUEUE_PARTITIONS=3: running jobs in every partition stop when
cancelled from another process (pub/sub through one node), and one not started is removed."""

from __future__ import annotations

from pathlib import Path

import redis.cluster

import opslib
from tests.helpers import Workers, wait_for
from worker.store.enqueue import enqueue

KINDS = "tests.queue.kinds_stopping"


def test_cancel_stops_running_jobs_in_every_partition(
    cr: redis.cluster.RedisCluster, plain_prefix: str, tmp_path: Path, node_urls: list[str]
) -> None:
    pool = Workers(node_urls[0], plain_prefix, tmp_path)
    try:
        cancel_on_three_partitions(cr, pool, plain_prefix)
    finally:
        pool.stop_all()


def cancel_on_three_partitions(cr: redis.cluster.RedisCluster, pool: Workers, prefix: str) -> None:
    env = {"QUEUE_PARTITIONS": "3", "RECLAIM_IDLE_MS": "600000"}  # no claim refresh in time: pub/sub alone
    proc = pool.start(KINDS, **env)
    at = {"client": cr, "prefix": prefix}
    ids = [f"run-{n}" for n in range(6)]
    for job_id in ids:
        enqueue(cr, "async_long", {"job_id": job_id, "sleep_s": "60"}, prefix=prefix, partitions=3)
    started = f"{prefix}test:started"
    wait_for(lambda: cr.scard(started) == 6, what="six jobs to start")
    assert set(opslib.cancel(ids, reason="cluster test", **at)["status"]) == {"cancelled"}
    wait_for(lambda: cr.scard(f"{prefix}test:stopped") == 6, timeout_s=10, what="the six to stop")
    proc.terminate()
    assert proc.wait(30) == 0
    later = enqueue(cr, "quick", {"job_id": "not-yet"}, prefix=prefix, partitions=3)
    assert later and opslib.cancel(["not-yet"], reason="cluster test", **at)["status"].tolist() == ["removed"]
