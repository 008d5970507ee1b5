"""A rolling deploy on the 3-primary cluster: an old and a new worker over three partitions, payloads of both
versions and a kind only the new worker runs; nothing fails, no new payload runs on the old worker."""

from __future__ import annotations

import json
from pathlib import Path

import redis.cluster

from tests.helpers import Workers, wait_for
from tests.queue.test_versions import NEW, OLD, QUICK
from worker.store.enqueue import NewJob, enqueue_many
from worker.store.keys import queue_partitions

PARTS = 3


def test_old_and_new_workers_side_by_side_on_a_cluster_fail_nothing(
    cr: redis.cluster.RedisCluster, plain_prefix: str, tmp_path: Path, node_urls: list[str]
) -> None:
    env = {**QUICK, "QUEUE_PARTITIONS": str(PARTS)}
    pool = Workers(node_urls[0], plain_prefix, tmp_path)
    try:
        pool.start(OLD, **env)
        pool.start(NEW, **env)
        wait_for(lambda: len(list(cr.scan_iter(match=f"{plain_prefix}kinds:*"))) >= 2, 30, "both workers declaring")
        jobs = [NewJob("send_email", {"email": f"u{i}@old", "job_id": f"old-{i}"}, version=1) for i in range(300)]
        jobs += [NewJob("send_email", {"to": f"u{i}@new", "job_id": f"new-{i}"}, version=2) for i in range(300)]
        jobs += [NewJob("send_sms", {"phone": f"+44{i}", "job_id": f"sms-{i}"}, version=1) for i in range(30)]
        enqueue_many(cr, jobs, prefix=plain_prefix, partitions=PARTS)
        ran_key = f"{plain_prefix}test:ran"

        def ran() -> dict[str, dict[str, str]]:
            return {k.decode(): json.loads(v) for k, v in cr.hgetall(ran_key).items()}

        wait_for(lambda: len(ran()) >= len(jobs), 60, f"{len(jobs)} jobs run on the cluster")
        done = ran()
        assert set(done) == {str(job.fields["job_id"]) for job in jobs if job.fields}
        assert {done[f"new-{i}"]["worker"] for i in range(300)} == {"new"}
        assert {done[f"sms-{i}"]["worker"] for i in range(30)} == {"new"}
        assert all(cr.xlen(part.dead) == 0 for part in queue_partitions(plain_prefix, PARTS))
    finally:
        pool.stop_all()
