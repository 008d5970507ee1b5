"""Versioned payloads with named queues: a hand-back stays in its entry's queue, a worker judges who can run an
entry by the workers that serve its queue, a handed-back job keeps its unique key, and the waiting counts say
which queue holds them (real worker processes on a real server)."""

from __future__ import annotations

import asyncio
import json
import time

import redis
import redis.asyncio as aioredis

import opslib
from tests.deploy.test_health import health
from tests.helpers import Workers, wait_for
from tests.queue.test_versions import NEW, OLD, QUICK, awaiting_series, declared, ran
from worker.embedded.servers import free_port
from worker.loop.handback import Fleet
from worker.store.enqueue import enqueue
from worker.store.keys import GROUP, Keys
from worker.store.wire import decode_member


def waiting_in(r: redis.Redis, keys: Keys) -> dict[str, dict[str, str]]:
    """The members of ``keys``' ``delayed`` that were handed back to wait for a worker, by job id."""
    members = (decode_member(m) for m in r.zrange(keys.delayed, 0, -1))
    return {m["job_id"]: m for m in members if "waiting_since" in m}


def test_a_bulk_job_handed_back_waits_and_runs_in_bulk_and_keeps_its_unique_key(
    r: redis.Redis, prefix: str, workers: Workers, redis_url: str
) -> None:
    bulk, default = Keys(prefix, queue="bulk"), Keys(prefix)
    port = free_port()
    metrics = {"METRICS_PORT": str(port), "METRICS_HOST": "127.0.0.1", "METRICS_INTERVAL_S": "0.2"}
    workers.start(OLD, WORKER_QUEUES="bulk", WORKER_NAME="old-bulk", **metrics, **QUICK)
    wait_for(lambda: declared(r, bulk, 1), 30, "the old worker declaring its kinds")
    ids = [f"b{i}" for i in range(20)]
    for job_id in ids:
        enqueue(r, "send_email", {"to": f"{job_id}@x", "job_id": job_id}, version=2, prefix=prefix, queue="bulk")
    lock = bulk.unique("send_email", "order-7")
    enqueue(r, "send_email", {"to": "u@x"}, version=2, prefix=prefix, queue="bulk", unique_key="order-7", job_id="u1")
    ids.append("u1")
    wait_for(lambda: set(waiting_in(r, bulk)) == set(ids), 30, "every bulk job handed back to wait in bulk")
    assert not r.exists(default.jobs) and not r.exists(default.delayed)  # nothing went to default's keys
    assert r.hget(lock, "job") == b"u1"  # the hand-back neither released the key nor took it again
    enqueue(r, "send_email", {"to": "v@x"}, version=2, prefix=prefix, queue="bulk", unique_key="order-7", job_id="u2")
    table = opslib.kinds(client=r, prefix=prefix)
    assert table.loc["send_email", ["awaiting", "awaiting_versions"]].tolist() == [21, "bulk v2: 21"]
    line = "healthy: 1 worker heartbeat(s) fresh; waiting for a worker: 21 send_email v2 in bulk"

    def says_it() -> bool:  # polled: a copy may be between two waits when health reads
        return health(redis_url, prefix, WORKER_NAME="old-bulk", WORKER_QUEUES="bulk").stdout.strip() == line

    wait_for(says_it, 30, f"health saying {line!r}")
    waits = {("bulk", "send_email", "2"): 21.0}
    wait_for(lambda: awaiting_series(port) == waits, 30, f"the gauge saying {waits}")
    workers.start(NEW, WORKER_QUEUES="bulk", **QUICK)
    wait_for(lambda: len(ran(r, bulk)) == len(ids), 30, "the new worker running them")
    wait_for(lambda: awaiting_series(port) == {}, 30, "the gauge's series gone with the jobs")
    done = ran(r, bulk)
    assert set(done) == set(ids) and {run["worker"] for run in done.values()} == {"new"}  # u2 was a duplicate
    assert all(int(run["handed_back"]) >= 1 for run in done.values())
    wait_for(lambda: not r.exists(lock), 10, "the unique key released by the copy's success")
    assert r.xlen(bulk.dead) == 0 and not r.exists(default.jobs) and not r.exists(default.dead)
    wait_for(lambda: r.xpending(bulk.jobs, GROUP)["pending"] == 0, 10, "every bulk entry acknowledged")


def test_a_worker_of_another_queue_is_no_one_to_hand_back_to(r: redis.Redis, prefix: str, workers: Workers) -> None:
    """The only worker that runs version 2 serves ``bulk``: a version-2 job in ``default`` waits in default's
    ``delayed`` (counted as awaiting) instead of going round the old worker, and a ``bulk`` one runs."""
    bulk, default = Keys(prefix, queue="bulk"), Keys(prefix)
    workers.start(OLD, WORKER_QUEUES="default", **QUICK)
    workers.start(NEW, WORKER_QUEUES="bulk", **QUICK)
    wait_for(lambda: declared(r, default, 2), 30, "both workers declaring their kinds")
    enqueue(r, "send_email", {"to": "d@x", "job_id": "in-default"}, version=2, prefix=prefix, queue="default")
    enqueue(r, "send_sms", {"phone": "+44", "job_id": "sms-default"}, version=1, prefix=prefix, queue="default")
    enqueue(r, "send_email", {"to": "b@x", "job_id": "in-bulk"}, version=2, prefix=prefix, queue="bulk")
    wait_for(lambda: "in-bulk" in ran(r, default), 30, "the bulk job run by the new worker")
    wait_for(lambda: set(waiting_in(r, default)) == {"in-default", "sms-default"}, 30, "default's jobs waiting")
    assert ran(r, default) == {"in-bulk": {"worker": "new", "v": "2", "address": "b@x", "handed_back": "0"}}
    assert all(int(m["handed_back"]) <= 2 for m in waiting_in(r, default).values())  # waited, no round trips
    table = opslib.kinds(client=r, prefix=prefix)
    assert table.loc["send_email", ["version", "awaiting", "awaiting_versions"]].tolist() == [2, 1, "v2: 1"]
    assert table.loc["send_sms", ["awaiting", "awaiting_versions"]].tolist() == [1, "v1: 1"]
    workers.start(NEW, WORKER_QUEUES="default", **QUICK)
    wait_for(lambda: len(ran(r, default)) == 3, 30, "a new worker of default running them")
    assert {run["worker"] for run in ran(r, default).values()} == {"new"}
    assert r.xlen(default.dead) == 0 and r.xlen(bulk.dead) == 0


def test_the_fleet_reads_versions_per_served_queue_and_a_declaration_without_queues_for_every_queue(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    keys = Keys(prefix)
    declarations = {
        "w-bulk": {"kinds": {"send_email": {"version": 3}}, "queues": ["bulk"]},
        "w-both": {"kinds": {"send_email": {"version": 2}, "send_sms": {}}, "queues": ["default", "bulk"]},
        "w-before-queues": {"kinds": {"send_fax": {"version": 2}}},  # a worker from before named queues
    }
    for name, declaration in declarations.items():
        r.zadd(keys.workers, {name: time.time() + 60})
        r.set(keys.declared(name), json.dumps(declaration), ex=60)

    async def refreshed() -> Fleet:
        client = aioredis.Redis.from_url(redis_url)
        fleet = Fleet(client, keys, grace_s=600)
        await fleet.refresh()
        await client.aclose()
        return fleet

    fleet = asyncio.run(refreshed())
    assert fleet.versions_in("default") == {"send_email": 2, "send_sms": 1, "send_fax": 2}
    assert fleet.versions_in("bulk") == {"send_email": 3, "send_sms": 1, "send_fax": 2}
    assert fleet.versions_in("critical") == {"send_fax": 2}
    assert fleet.recent("send_email") and not fleet.recent("send_telex")


def test_a_fair_job_handed_back_waits_in_delayed_not_for_another_turn_and_keeps_its_key(
    r: redis.Redis, keys: Keys, workers: Workers
) -> None:
    """A fair job had its key's turn before a worker read it: handed back, it waits in ``delayed`` (and goes
    back onto ``jobs``) with its ``fair_key``, never into ``fair:queue`` again."""
    workers.start(OLD, **QUICK)
    wait_for(lambda: declared(r, keys, 1), 30, "the old worker declaring its kinds")
    ids = [f"f{i}" for i in range(10)]
    for i, job_id in enumerate(ids):
        enqueue(
            r,
            "send_email",
            {"to": f"{job_id}@x", "job_id": job_id},
            version=2,
            prefix=keys.prefix,
            fair_key=f"venue-{i % 2}",
        )
    wait_for(lambda: set(waiting_in(r, keys)) == set(ids), 30, "every fair job handed back to wait")
    assert {m["fair_key"] for m in waiting_in(r, keys).values()} == {"venue-0", "venue-1"}
    assert r.zcard(keys.fair_queue) == 0
    table = opslib.kinds(client=r, prefix=keys.prefix)
    assert table.loc["send_email", ["waiting", "awaiting", "awaiting_versions"]].tolist() == [0, 10, "v2: 10"]
    workers.start(NEW, **QUICK)
    wait_for(lambda: set(ran(r, keys)) == set(ids), 30, "the new worker running them")
    assert r.zcard(keys.fair_queue) == 0 and r.xlen(keys.dead) == 0
