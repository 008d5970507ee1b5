"""Rolling deploys on the 3-primary cluster: an old and a new worker over three partitions, payloads of both
versions and a kind only the new worker runs; nothing fails, no new payload runs on the old worker. With only
old workers of ``bulk`` up (a new worker serves ``default`` alone) new payloads and kinds wait in bulk's
partitions, counted, a unique key held; a job delayed before the deploy runs after it through the upcaster; a
patch replay of bulk's dead letters goes back to each one's own partition of bulk."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import redis.cluster

import opslib
from tests.helpers import Workers, wait_for
from tests.opslib.helpers import bury
from tests.queue.test_versions import NEW, OLD, QUICK, awaiting_series
from worker.embedded.servers import free_port
from worker.store.enqueue import NewJob, enqueue, enqueue_many
from worker.store.keys import queue_partitions
from worker.store.wire import decode_member

PARTS = 3


def ran_on(cr: redis.cluster.RedisCluster, prefix: str) -> dict[str, dict[str, str]]:
    return {k.decode(): json.loads(v) for k, v in cr.hgetall(f"{prefix}test:ran").items()}


def holder_series(ports: list[int]) -> dict[tuple[str, str, str], float] | None:
    """The ``jobs_awaiting_worker`` series of whichever of the workers on ``ports`` holds the metrics lock."""
    return next((series for port in ports if (series := awaiting_series(port)) is not None), None)


def declaring(cr: redis.cluster.RedisCluster, prefix: str, count: int) -> bool:
    return len(list(cr.scan_iter(match=f"{prefix}kinds:*"))) >= count


def test_old_and_new_workers_side_by_side_on_a_cluster_fail_nothing(
    cr: redis.cluster.RedisCluster, plain_prefix: str, tmp_path: Path, node_urls: list[str]
) -> None:
    env = {**QUICK, "QUEUE_PARTITIONS": str(PARTS)}
    pool = Workers(node_urls[0], plain_prefix, tmp_path)
    try:
        pool.start(OLD, **env)
        pool.start(NEW, **env)
        wait_for(lambda: declaring(cr, plain_prefix, 2), 30, "both workers declaring")
        jobs = [NewJob("send_email", {"email": f"u{i}@old", "job_id": f"old-{i}"}, version=1) for i in range(300)]
        jobs += [NewJob("send_email", {"to": f"u{i}@new", "job_id": f"new-{i}"}, version=2) for i in range(300)]
        jobs += [NewJob("send_sms", {"phone": f"+44{i}", "job_id": f"sms-{i}"}, version=1) for i in range(30)]
        enqueue_many(cr, jobs, prefix=plain_prefix, partitions=PARTS)
        wait_for(lambda: len(ran_on(cr, plain_prefix)) >= len(jobs), 60, f"{len(jobs)} jobs run on the cluster")
        done = ran_on(cr, plain_prefix)
        assert set(done) == {str(job.fields["job_id"]) for job in jobs if job.fields}
        assert {done[f"new-{i}"]["worker"] for i in range(300)} == {"new"}
        assert {done[f"sms-{i}"]["worker"] for i in range(30)} == {"new"}
        assert all(cr.xlen(part.dead) == 0 for part in queue_partitions(plain_prefix, PARTS))
    finally:
        pool.stop_all()


def test_with_only_old_workers_of_bulk_jobs_wait_in_its_partitions_then_run_after_the_deploy(
    cr: redis.cluster.RedisCluster, plain_prefix: str, tmp_path: Path, node_urls: list[str]
) -> None:
    env = {**QUICK, "QUEUE_PARTITIONS": str(PARTS)}
    bulk, default = queue_partitions(plain_prefix, PARTS, "bulk"), queue_partitions(plain_prefix, PARTS)
    at: dict[str, Any] = {"prefix": plain_prefix, "partitions": PARTS, "queue": "bulk"}
    pool = Workers(node_urls[0], plain_prefix, tmp_path)
    ports = [free_port(), free_port()]
    metrics = {"METRICS_HOST": "127.0.0.1", "METRICS_INTERVAL_S": "0.2"}
    try:
        old = pool.start(OLD, WORKER_QUEUES="bulk", METRICS_PORT=str(ports[0]), **metrics, **env)
        wait_for(lambda: awaiting_series(ports[0]) is not None, 30, "the old worker holding the metrics lock")
        pool.start(NEW, WORKER_QUEUES="default", METRICS_PORT=str(ports[1]), **metrics, **env)  # v2, not in bulk
        wait_for(lambda: declaring(cr, plain_prefix, 2), 30, "both workers declaring")
        ids = [f"n{i}" for i in range(30)]
        for job_id in ids:
            enqueue(cr, "send_email", {"to": f"{job_id}@x", "job_id": job_id}, version=2, **at)
        for i in range(6):
            enqueue(cr, "send_sms", {"phone": f"+44{i}", "job_id": f"sms-{i}"}, version=1, **at)
        enqueue(cr, "send_email", {"to": "u@x"}, version=2, unique_key="order-9", job_id="u1", **at)
        ids += [*(f"sms-{i}" for i in range(6)), "u1"]

        def waiting() -> set[str]:
            members = [decode_member(m) for part in bulk for m in cr.zrange(part.delayed, 0, -1)]
            return {m["job_id"] for m in members if "waiting_since" in m}

        wait_for(lambda: waiting() == set(ids), 30, "every bulk job handed back to wait in bulk's partitions")
        assert len({part.partition for part in bulk if cr.zcard(part.delayed)}) == PARTS  # spread over three
        [lock] = list(cr.scan_iter(match=f"{plain_prefix}q:bulk:*unique:send_email:order-9"))
        assert cr.hget(lock, "job") == b"u1"
        table = opslib.kinds(client=cr, prefix=plain_prefix)
        assert table.loc["send_email", ["awaiting", "awaiting_versions"]].tolist() == [31, "bulk v2: 31"]
        assert table.loc["send_sms", ["awaiting", "awaiting_versions"]].tolist() == [6, "bulk v1: 6"]

        # The old worker holds the metrics lock; it lacks send_sms, which the new worker declares: named.
        waits = {("bulk", "send_email", "2"): 31.0, ("bulk", "send_sms", "1"): 6.0}
        wait_for(lambda: awaiting_series(ports[0]) == waits, 30, f"the gauge over bulk's partitions saying {waits}")
        old.send_signal(signal.SIGTERM)  # the deploy: the old worker goes, a job delayed before it stays
        assert old.wait(30) == 0, pool.log(old)
        member = enqueue(cr, "send_email", {"email": "late@old.example"}, delay_s=1, version=1, **at)
        ids.append(decode_member(member)["job_id"])
        pool.start(NEW, WORKER_QUEUES="bulk", **env)
        wait_for(lambda: set(ran_on(cr, plain_prefix)) == set(ids), 60, "the new bulk worker running them")
        done = ran_on(cr, plain_prefix)
        assert {run["worker"] for run in done.values()} == {"new"} and done[ids[-1]]["address"] == "late@old.example"
        assert done[ids[-1]]["v"] == "2"  # upcast from version 1
        wait_for(lambda: not cr.exists(lock), 10, "the unique key released by the copy's success")
        assert all(cr.xlen(part.dead) == 0 for part in bulk + default)
        assert all(cr.xlen(part.jobs) == 0 for part in default)  # nothing left bulk (the stream is the group's)
        wait_for(lambda: holder_series(ports[1:]) == {}, 30, "the gauge's series gone with the jobs")
    finally:
        pool.stop_all()


def test_a_patch_replay_on_a_cluster_puts_each_bulk_dead_letter_back_in_its_partition(
    cr: redis.cluster.RedisCluster, plain_prefix: str
) -> None:
    bulk = queue_partitions(plain_prefix, PARTS, "bulk")
    cr.set(bulk[0].partitions, PARTS)  # as the workers record it
    cr.sadd(bulk[0].queues, "bulk")
    error = {"attempts": "1", "error": "MailRejected: no such mailbox", "traceback": "tb", "reason": "exhausted"}
    for part in bulk:
        fields = {"kind": "send_email", "job_id": f"p{part.partition}", "attempts": "0", "email": "x@typo"}
        bury(cr, part, fields, error)  # type: ignore[arg-type]
    at = {"client": cr, "prefix": plain_prefix}
    plan = opslib.replay_kind("send_email", patch={"email": "ada@example.org", "v": 1}, dry_run=True, **at)
    assert plan["changes"].tolist() == ["email: 'x@typo' -> 'ada@example.org'; v: (none) -> '1'"] * PARTS
    done = opslib.replay_kind("send_email", patch={"email": "ada@example.org", "v": 1}, reason="INC-2293", **at)
    assert done["status"].tolist() == ["replayed"] * PARTS
    for part in bulk:
        [(_id, fields)] = cr.xrange(part.jobs)
        assert (fields[b"job_id"], fields[b"email"], fields[b"v"]) == (
            f"p{part.partition}".encode(),
            b"ada@example.org",
            b"1",
        )
        assert cr.xlen(part.dead) == 0
