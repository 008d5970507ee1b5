"""Stopping a job on the 3-primary cluster with QUEUE_PARTITIONS=3 (as tests/queue/test_stopping.py and
test_cancel.py do on one server): attempts that ignore their timeout never overlap, a handler heeding
job.stopping stops at its timeout, a child process that will not stop is killed, SIGTERM keeps the grace
with each partition's entries acknowledged or given back, and a cancel removes a job wherever it waits or
stops it by its mark alone (docs/worker.md, "Stopping a job"; tests/cluster/test_cancel_cluster.py: by
pub/sub)."""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.cluster

import opslib
from tests.helpers import Workers, exits_within_grace, wait_for
from tests.queue.test_stopping import read_ahead_given_back
from worker.store.cancels import new_mark
from worker.store.enqueue import enqueue
from worker.store.failures import now_iso
from worker.store.keys import GROUP, Keys, partition_of, queue_partitions
from worker.store.scripts import Scripts
from worker.store.wire import encode_member, text

KINDS = "tests.queue.kinds_stopping"
PARTS = 3


@pytest.fixture
def pool(plain_prefix: str, tmp_path: Path, node_urls: list[str]) -> Iterator[Workers]:
    """Worker processes on the cluster (REDIS_URL: its first node) of a partitioned queue."""
    workers = Workers(node_urls[0], plain_prefix, tmp_path)
    yield workers
    workers.stop_all()


def one_per_partition(stem: str) -> list[str]:
    """Job ids ``stem-N``, the first to fall in each partition, in partition order."""
    ids: dict[int, str] = {}
    for n in itertools.count():
        ids.setdefault(partition_of(f"{stem}-{n}", PARTS), f"{stem}-{n}")
        if len(ids) == PARTS:
            return [ids[p] for p in range(PARTS)]
    raise AssertionError("unreachable")


def parts(prefix: str) -> list[Keys]:
    return queue_partitions(prefix, PARTS)


def add(
    cr: redis.cluster.RedisCluster, prefix: str, kind: str, job_id: str, delay_s: float | None = None, **fields: str
) -> str:
    return enqueue(cr, kind, {"job_id": job_id, **fields}, delay_s=delay_s, prefix=prefix, partitions=PARTS)


def dead(cr: redis.cluster.RedisCluster, prefix: str) -> dict[str, dict[str, str]]:
    entries = (fields for keys in parts(prefix) for _, fields in cr.xrange(keys.dead))
    return {text(f[b"job_id"]): {text(k): text(v) for k, v in f.items()} for f in entries}


def spans(cr: redis.cluster.RedisCluster, prefix: str, job_id: str) -> list[tuple[float, float]]:
    return sorted(tuple(map(float, s.split())) for s in cr.lrange(f"{prefix}test:spans:{job_id}", 0, -1))  # type: ignore[misc]


def test_timeouts_and_process_isolation_in_every_partition(
    cr: redis.cluster.RedisCluster, plain_prefix: str, pool: Workers
) -> None:
    """Three stubborn plain jobs (one a partition; 0.8 s each, timeout_s=0.3, 2 retries), a polite one and a
    child sleeping 60 s: every attempt ends when its handler has, so none overlaps; the child is killed."""
    stubborn = one_per_partition("stubborn")
    for job_id in stubborn:
        add(cr, plain_prefix, "stubborn", job_id)
    add(cr, plain_prefix, "polite", "polite-1", sleep_s="20")
    add(cr, plain_prefix, "isolated_sleep", "child-1")
    started = time.monotonic()
    pool.burst(KINDS, QUEUE_PARTITIONS=str(PARTS), WORKER_CONCURRENCY="4", STOP_GRACE_S="0.5")
    assert time.monotonic() - started < 30
    buried = dead(cr, plain_prefix)
    for job_id in stubborn:
        attempts = spans(cr, plain_prefix, job_id)
        assert len(attempts) == 3, attempts
        for (_, end), (start, _) in itertools.pairwise(attempts):
            assert start >= end, f"job {job_id}: an attempt started at {start} before the previous ended at {end}"
        assert buried[job_id]["error"] == "JobTimeout: stubborn ran longer than its timeout of 0.3 s"
    [(start, end)] = spans(cr, plain_prefix, "polite-1")
    assert 0.3 <= end - start < 1.3 and cr.get(f"{plain_prefix}test:stopped:polite-1") == b"yes"
    with pytest.raises(ProcessLookupError):
        os.kill(int(cr.get(f"{plain_prefix}test:pid:child-1")), 0)  # the child is gone
    assert "JobKilled: isolated_sleep's process was killed after STOP_GRACE_S=0.5 s" in buried["child-1"]["traceback"]
    assert all(cr.xpending(keys.jobs, GROUP)["pending"] == 0 for keys in parts(plain_prefix))


def test_sigterm_keeps_the_grace_and_gives_back_in_every_partition(
    cr: redis.cluster.RedisCluster, plain_prefix: str, pool: Workers
) -> None:
    """Mid-run at SIGTERM, in every partition: a job that finishes within SHUTDOWN_GRACE_S (acknowledged),
    a plain and an async one that stop when told (given back at once), a plain one that ignores the event
    (given back 3 s short of idle). The worker exits 0 within the grace, STOP_GRACE_S and a second and a half."""
    idle_ms = 600_000
    jobs = {
        "finishes": ("sync_long", {"sleep_s": "0.5"}),
        "heeds": ("sync_long", {"sleep_s": "30"}),
        "ignores": ("sync_long", {"sleep_s": "30", "ignore": "yes"}),
        "async": ("async_long", {"sleep_s": "30"}),
    }
    ids = {name: one_per_partition(name) for name in jobs}
    for name, (kind, fields) in jobs.items():
        for job_id in ids[name]:
            add(cr, plain_prefix, kind, job_id, **fields)
    env = {"QUEUE_PARTITIONS": str(PARTS), "WORKER_CONCURRENCY": "12", "SHUTDOWN_GRACE_S": "1", "STOP_GRACE_S": "1"}
    proc = pool.start(KINDS, RECLAIM_IDLE_MS=str(idle_ms), **env)
    wait_for(lambda: cr.scard(f"{plain_prefix}test:started") == 12, what="the twelve jobs to start")
    exits_within_grace(proc)
    assert {text(j) for j in cr.smembers(f"{plain_prefix}test:done")} == set(ids["finishes"])
    assert {text(j) for j in cr.smembers(f"{plain_prefix}test:stopped")} == set(ids["heeds"] + ids["async"])
    for partition, keys in enumerate(parts(plain_prefix)):
        pending = {
            text(cr.xrange(keys.jobs, p["message_id"], p["message_id"])[0][1][b"job_id"]): p
            for p in cr.xpending_range(keys.jobs, GROUP, "-", "+", 10)
        }
        assert set(pending) == {ids[name][partition] for name in ("heeds", "ignores", "async")}
        for name in ("heeds", "async"):
            assert pending[ids[name][partition]]["time_since_delivered"] >= idle_ms  # reclaimable at once
        assert idle_ms - 3000 <= pending[ids["ignores"][partition]]["time_since_delivered"] < idle_ms
    log = pool.log(proc)
    assert "Gave back 6 jobs told to stop at the end of SHUTDOWN_GRACE_S=1 s" in log
    assert "3 jobs still ran after they were told to stop (their handler ignores job.stopping)" in log


def test_cancel_removes_a_job_wherever_it_waits_and_a_mark_alone_stops_a_running_one(
    cr: redis.cluster.RedisCluster,
    plain_prefix: str,
    pool: Workers,
    node_urls: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On three partitions: a parked, a throttled, a delayed, a fair, a unique and a named queue's waiting
    job are each removed by its partition's script (the unique key released) and never run; a running plain
    job of bulk is stopped by its mark alone (no announcement; claims refreshed every 200 s), read when the
    worker subscribes again through the cluster's node."""
    prefix, at = plain_prefix, {"client": cr, "prefix": plain_prefix}
    monkeypatch.setenv("QUEUE_PARTITIONS", str(PARTS))  # opslib's count until a worker has recorded one
    held = dict(zip(one_per_partition("c-held")[:2], ("park", "defer"), strict=True))  # a group each
    for job_id in held:
        add(cr, prefix, "quick", job_id)
    for job_id, how in held.items():  # as a worker leaves them: read, then parked (a paused kind) or deferred
        keys = parts(prefix)[partition_of(job_id, PARTS)]
        cr.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
        [(entry, fields)] = cr.xreadgroup(GROUP, "c1", {keys.jobs: ">"}, count=1)[0][1]
        scripts = Scripts(cr, keys)
        if how == "park":
            cr.hset(keys.paused, "quick", '{"by": "ana"}')
            assert scripts.park(text(entry), "quick") == 1
        else:
            member = encode_member({text(k): text(v) for k, v in fields.items()})
            assert scripts.defer(text(entry), time.time() + 0.2, member) == 1
    add(cr, prefix, "quick", "c-later", delay_s=0.3)
    enqueue(cr, "quick", {"job_id": "c-fair"}, fair_key="org-1", prefix=prefix, partitions=PARTS)
    enqueue(cr, "quick", {"job_id": "c-unique"}, unique_key="order:1", prefix=prefix, partitions=PARTS)
    enqueue(cr, "quick", {"job_id": "c-bulk"}, queue="bulk", prefix=prefix, partitions=PARTS)
    removed = [*held, "c-later", "c-fair", "c-unique", "c-bulk"]
    assert set(opslib.cancel(removed, reason="cluster test", **at)["status"]) == {"removed"}
    assert not any(cr.exists(keys.unique("quick", "order:1")) for keys in parts(prefix))
    for keys in parts(prefix):
        cr.hdel(keys.paused, "quick")
    add(cr, prefix, "quick", "c-kept")
    bulk = queue_partitions(prefix, PARTS, "bulk")
    plain = enqueue(
        cr, "sync_long", {"job_id": "c-plain", "sleep_s": "30"}, queue="bulk", prefix=prefix, partitions=PARTS
    )
    proc = pool.start(KINDS, QUEUE_PARTITIONS=str(PARTS), WORKER_QUEUES="default,bulk", RECLAIM_IDLE_MS="600000")
    wait_for(lambda: cr.sismember(f"{prefix}test:started", "c-plain"), what="the plain job to start")
    mark = new_mark("ana", "mark only", now_iso(), "b-1")
    assert Scripts(cr, bulk[partition_of("c-plain", PARTS)]).cancel_entry(plain, mark)[0] == b"cancelled"
    for url in node_urls:  # the worker's subscription is on one of them: it subscribes again
        with redis.Redis.from_url(url) as node:
            node.client_kill_filter(_type="pubsub")
    wait_for(lambda: cr.sismember(f"{prefix}test:stopped", "c-plain"), timeout_s=10, what="the plain job to stop")
    wait_for(lambda: cr.sismember(f"{prefix}test:done", "c-kept"), what="the kept job to run")
    time.sleep(0.5)  # past the throttled and the delayed jobs' due times: had they stayed, they would be due
    proc.terminate()
    assert proc.wait(30) == 0
    assert {text(j) for j in cr.smembers(f"{prefix}test:done")} == {"c-kept"}  # none of the six removed ran
    assert all(cr.xpending(keys.jobs, GROUP)["pending"] == 0 for keys in [*parts(prefix), *bulk])
    assert not dead(cr, prefix)


def test_entries_read_ahead_are_given_back_from_every_partition_while_hung_handlers_hold_the_slots(
    cr: redis.cluster.RedisCluster, plain_prefix: str, pool: Workers, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="worker"):
        read_ahead_given_back(cr, plain_prefix, pool, partitions=PARTS)
    assert "3 entries read ahead cannot start: every slot is held by a handler" in caplog.text
