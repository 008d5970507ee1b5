"""Cancelling jobs from another process against a real server: a running job stops (async within a second,
plain through job.stopping), one not started is removed and never runs, and the cancel survives a lost
pub/sub message through the durable mark (docs/worker.md, "Cancelling a job")."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Callable

import pytest
import redis

import opslib
from tests.helpers import Workers, registry_of, wait_for
from worker.cli.assembly import assembled
from worker.settings import Settings
from worker.store.cancels import mark_cutoff, new_mark, trim_marks
from worker.store.enqueue import enqueue
from worker.store.failures import now_iso
from worker.store.keys import GROUP, Keys
from worker.store.scripts import Scripts
from worker.store.wire import encode_member

KINDS = "tests.queue.kinds_stopping"
FAST_REFRESH = {"RECLAIM_IDLE_MS": "600", "RECLAIM_INTERVAL_S": "0.2"}
SLOW_REFRESH = {"RECLAIM_IDLE_MS": "600000"}  # claims refreshed every 200 s: only pub/sub is fast


def tkey(keys: Keys, name: str) -> str:
    return f"{keys.prefix}test:{name}"


def job_id_of(r: redis.Redis, keys: Keys, entry_id: str) -> str:
    return r.xrange(keys.jobs, entry_id, entry_id)[0][1][b"job_id"].decode()


def ended_at(r: redis.Redis, keys: Keys, job_id: str) -> float:
    [span] = r.lrange(tkey(keys, f"spans:{job_id}"), 0, -1)
    return float(span.split()[1])


def test_a_job_cancelled_before_it_starts_never_runs(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    waiting = job_id_of(r, keys, enqueue(r, "quick", {}, prefix=keys.prefix))
    by_entry = enqueue(r, "quick", {}, prefix=keys.prefix)
    later = enqueue(r, "quick", {"job_id": "later-1"}, delay_s=0.3, prefix=keys.prefix)
    kept = job_id_of(r, keys, enqueue(r, "quick", {}, prefix=keys.prefix))
    at = {"client": r, "prefix": keys.prefix}
    with pytest.raises(opslib.OpslibError, match="cancel needs a reason"):
        opslib.cancel([waiting], reason=" ", **at)
    dry = opslib.cancel([waiting, by_entry, "later-1", "nope"], reason="wrong template, INC-2217", dry_run=True, **at)
    assert list(dry["status"]) == ["would remove", "would remove", "would remove", "not found"]
    assert r.xlen(keys.jobs) == 3 and r.zcard(keys.delayed) == 1  # a dry run changes nothing
    done = opslib.cancel([waiting, by_entry, "later-1", "nope"], reason="wrong template, INC-2217", by="ana", **at)
    assert list(done["status"]) == ["removed", "removed", "removed", "not found"]
    assert list(done.columns) == ["id", "job_id", "kind", "status", "batch"]
    assert later and r.zcard(keys.delayed) == 0
    workers.here(KINDS)
    assert r.smembers(tkey(keys, "done")) == {kept.encode()}  # 0 runs of the three cancelled
    again = opslib.cancel([waiting], reason="twice", **at)
    assert list(again["status"]) == ["finished"]
    found = opslib.find(waiting, **at)
    assert list(found["where"]) == ["cancelled"]
    assert found["status"].iloc[0] == "removed by ana" and found["reason"].iloc[0] == "wrong template, INC-2217"
    logged = opslib.actions(**at)
    assert "cancel" in set(logged["action"])


def test_a_parked_or_throttled_job_cancelled_is_removed_and_never_runs(
    r: redis.Redis, keys: Keys, workers: Workers
) -> None:
    """One job parked (its kind paused) and one deferred by a throttle, as a worker leaves them, each holding
    a unique key: each is removed by its own script, its key released, and never runs, after the pause is
    lifted and the throttle's turn has come."""
    parked, deferred = (
        job_id_of(r, keys, enqueue(r, "quick", {}, unique_key=f"k{n}", prefix=keys.prefix)) for n in range(2)
    )
    locks = [keys.unique("quick", f"k{n}") for n in range(2)]
    assert r.exists(*locks) == 2
    kept = job_id_of(r, keys, enqueue(r, "quick", {}, prefix=keys.prefix))
    r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
    (one, _), (two, fields), _third = r.xreadgroup(GROUP, "c1", {keys.jobs: ">"}, count=2)[0][1] + [(None, None)]
    scripts = Scripts(r, keys)
    r.hset(keys.paused, "quick", '{"by": "ana"}')
    assert scripts.park(one.decode(), "quick") == 1
    member = encode_member({k.decode(): v.decode() for k, v in fields.items()})
    assert scripts.defer(two.decode(), time.time() + 0.2, member) == 1
    at = {"client": r, "prefix": keys.prefix}
    dry = opslib.cancel([parked, deferred], reason="INC-2218", dry_run=True, **at)
    assert list(dry["status"]) == ["would remove", "would remove"]
    assert r.zcard(keys.parked) == 1 and r.zcard(keys.throttled) == 1  # a dry run changes nothing
    done = opslib.cancel([parked, deferred], reason="INC-2218", by="ana", **at)
    assert list(done["status"]) == ["removed", "removed"] and list(done["kind"]) == ["quick", "quick"]
    assert r.zcard(keys.parked) == 0 and r.zcard(keys.throttled) == 0
    assert r.exists(*locks) == 0  # released in the cancel's own script
    r.hdel(keys.paused, "quick")
    assert scripts.unpark("quick") == 0
    workers.here(KINDS)
    assert r.smembers(tkey(keys, "done")) == {kept.encode()}  # 0 runs of the two cancelled
    for job_id in (parked, deferred):  # the mark, and the archive's record with the job's own fields
        found = opslib.find(job_id, **at)
        assert sorted(found["status"]) == ["discarded", "removed by ana"]
        assert list(found.loc[found["status"] == "discarded", "kind"]) == ["quick"]


def test_the_cancel_marks_go_once_no_worker_holds_their_entry(r: redis.Redis, keys: Keys) -> None:
    """Each cancel call trims the marks older than a day that no worker holds (a job removed, or one whose
    entry was acknowledged), in bounded steps; a mark whose entry is still pending to a worker stays."""
    scripts, old = Scripts(r, keys), "2026-01-01T00:00:00.000Z"
    removed, held, acked, recent = (enqueue(r, "quick", {}, prefix=keys.prefix) for _ in range(4))
    ids = {entry: job_id_of(r, keys, entry) for entry in (removed, held, acked, recent)}
    assert scripts.cancel_entry(removed, new_mark("ana", "old", old, "b-0"))[0] == b"removed"
    r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
    r.xreadgroup(GROUP, "c1", {keys.jobs: ">"}, count=2)  # held and acked: pending to a worker
    for entry in (held, acked):
        assert scripts.cancel_entry(entry, new_mark("ana", "old", old, "b-0"))[0] == b"cancelled"
    r.xack(keys.jobs, GROUP, acked)
    assert scripts.cancel_entry(recent, new_mark("ana", "new", now_iso(), "b-1"))[0] == b"removed"
    stale = {f"old-{n}": json.dumps({"at": old, "status": "removed"}) for n in range(250)}
    r.hset(keys.cancels, mapping={**stale, "junk": "not a mark"})  # more than one step's 100
    opslib.cancel("nope", reason="trims the marks", client=r, prefix=keys.prefix)
    assert set(r.hkeys(keys.cancels)) == {ids[held].encode(), ids[recent].encode()}
    r.xack(keys.jobs, GROUP, held)  # its worker stopped it
    assert trim_marks(scripts, mark_cutoff()) == 1
    assert r.hkeys(keys.cancels) == [ids[recent].encode()]
    assert trim_marks(scripts, mark_cutoff(keep_s=-60)) == 1  # past its keep, the last one goes too


@pytest.mark.parametrize("kind", ["async_long", "sync_long"])
def test_a_running_job_stops_when_cancelled_and_is_never_retried(
    r: redis.Redis, keys: Keys, workers: Workers, kind: str
) -> None:
    job_id = job_id_of(r, keys, enqueue(r, kind, {"sleep_s": "30"}, prefix=keys.prefix))
    proc = workers.start(KINDS, "--burst", **SLOW_REFRESH)
    wait_for(lambda: r.sismember(tkey(keys, "started"), job_id), what="the job to start")
    [row] = opslib.cancel(job_id, reason="sending wrong emails", by="ana", client=r, prefix=keys.prefix).itertuples()
    assert row.status == "cancelled"
    assert proc.wait(30) == 0
    assert r.smembers(tkey(keys, "stopped")) == {job_id.encode()}
    assert r.xlen(keys.dead) == 0 and r.zcard(keys.delayed) == 0  # neither dead-lettered nor retried
    assert r.xpending(keys.jobs, GROUP)["pending"] == 0
    assert f"{kind} {job_id}" in workers.log(proc) and "was cancelled by ana: sending wrong emails" in workers.log(proc)
    found = opslib.find(job_id, client=r, prefix=keys.prefix).set_index("where")
    assert found.loc["cancelled", "status"] == "cancelled by ana"
    assert found.loc["cancelled", "reason"] == "sending wrong emails"
    assert list(opslib.actions(client=r, prefix=keys.prefix)["action"]) == ["cancel"]


def test_cancel_latency_over_many_cancels_from_another_process(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    """40 running async jobs cancelled one at a time from this process: each handler's CancelledError comes
    within a second of the call to opslib.cancel (p99), through pub/sub (claims are refreshed every 200 s)."""
    ids = [job_id_of(r, keys, enqueue(r, "async_long", {"sleep_s": "60"}, prefix=keys.prefix)) for _ in range(40)]
    proc = workers.start(KINDS, WORKER_CONCURRENCY="40", **SLOW_REFRESH)
    wait_for(lambda: r.scard(tkey(keys, "started")) == 40, what="the 40 jobs to start")
    latencies = []
    for job_id in ids:
        called = time.time()
        opslib.cancel(job_id, reason="latency test", client=r, prefix=keys.prefix)
        wait_for(lambda job_id=job_id: r.sismember(tkey(keys, "stopped"), job_id), timeout_s=10, what="the stop")
        latencies.append(ended_at(r, keys, job_id) - called)
    cuts = statistics.quantiles(latencies, n=100)
    print(f"cancel latency over {len(latencies)} cancels: p50 {cuts[49] * 1000:.1f} ms, p99 {cuts[98] * 1000:.1f} ms")
    assert cuts[98] < 1.0
    proc.terminate()
    assert proc.wait(30) == 0


def test_a_cancel_whose_announcement_is_lost_is_found_at_the_next_claim_refresh(
    r: redis.Redis, keys: Keys, workers: Workers
) -> None:
    """The mark written without its pub/sub message (as when the subscription was down): the worker finds it
    at its next claim refresh (every 0.2 s here); and a killed subscription is made again."""
    job_id = job_id_of(r, keys, enqueue(r, "async_long", {"sleep_s": "30"}, prefix=keys.prefix))
    second = job_id_of(r, keys, enqueue(r, "async_long", {"sleep_s": "30"}, prefix=keys.prefix))
    proc = workers.start(KINDS, **FAST_REFRESH)
    wait_for(lambda: r.scard(tkey(keys, "started")) == 2, what="the jobs to start")
    entry = r.xrange(keys.jobs)[0][0].decode()
    status, _ = Scripts(r, keys).cancel_entry(entry, new_mark("ana", "no message", "now", "b-1"))
    assert status == b"cancelled"
    wait_for(lambda: r.sismember(tkey(keys, "stopped"), job_id), timeout_s=5, what="the marked job to stop")
    r.client_kill_filter(_type="pubsub")  # the worker's subscription dropped: cancels still arrive
    opslib.cancel(second, reason="after a reconnect", client=r, prefix=keys.prefix)
    wait_for(lambda: r.sismember(tkey(keys, "stopped"), second), timeout_s=5, what="the second job to stop")
    proc.terminate()
    assert proc.wait(30) == 0
    assert r.xpending(keys.jobs, GROUP)["pending"] == 0


def test_a_running_job_cancelled_releases_its_unique_key_when_its_worker_acknowledges_it(
    r: redis.Redis, keys: Keys, workers: Workers
) -> None:
    """The key is held while the job runs (docs/worker.md, "Unique jobs"), and released by the worker's
    acknowledgement of the cancel (ack_unique): a new job of the same key can then be enqueued."""
    first = enqueue(r, "async_long", {"sleep_s": "30"}, unique_key="order:4471", prefix=keys.prefix)
    job_id, lock = job_id_of(r, keys, first), keys.unique("async_long", "order:4471")
    proc = workers.start(KINDS, "--burst", **SLOW_REFRESH)
    wait_for(lambda: r.sismember(tkey(keys, "started"), job_id), what="the job to start")
    assert enqueue(r, "async_long", {"sleep_s": "30"}, unique_key="order:4471", prefix=keys.prefix) == first
    assert list(opslib.cancel(job_id, reason="INC-2220", client=r, prefix=keys.prefix)["status"]) == ["cancelled"]
    assert proc.wait(30) == 0
    assert r.sismember(tkey(keys, "stopped"), job_id) and not r.exists(lock)
    assert r.xpending(keys.jobs, GROUP)["pending"] == 0 and r.xlen(keys.dead) == 0
    assert enqueue(r, "async_long", {"sleep_s": "0"}, unique_key="order:4471", prefix=keys.prefix) != first


def test_cancel_reaches_the_jobs_of_a_named_queue(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    """Jobs of the named queue bulk (under q:bulk:): a waiting and a delayed one are removed and never run;
    a running async one is stopped through pub/sub alone (claims refreshed every 200 s), a running plain one
    by its mark in bulk's cancels alone (no announcement; read when the worker subscribes again)."""
    bulk, at = Keys(keys.prefix, queue="bulk"), {"client": r, "prefix": keys.prefix}
    enqueue(r, "quick", {"job_id": "b-waits"}, queue="bulk", prefix=keys.prefix)
    enqueue(r, "quick", {"job_id": "b-later"}, delay_s=0.3, queue="bulk", prefix=keys.prefix)
    assert list(opslib.cancel(["b-waits", "b-later"], reason="INC-2221", **at)["status"]) == ["removed", "removed"]
    assert (r.xlen(bulk.jobs), r.zcard(bulk.delayed)) == (0, 0)
    enqueue(r, "async_long", {"job_id": "b-async", "sleep_s": "30"}, queue="bulk", prefix=keys.prefix)
    plain = enqueue(r, "sync_long", {"job_id": "b-plain", "sleep_s": "30"}, queue="bulk", prefix=keys.prefix)
    enqueue(r, "quick", {"job_id": "b-kept"}, queue="bulk", prefix=keys.prefix)
    proc = workers.start(KINDS, WORKER_QUEUES="default,bulk", **SLOW_REFRESH)
    wait_for(lambda: r.scard(tkey(keys, "started")) == 2 and r.scard(tkey(keys, "done")) == 1, what="bulk's jobs")
    assert list(opslib.cancel("b-async", reason="INC-2221", **at)["status"]) == ["cancelled"]
    wait_for(lambda: r.sismember(tkey(keys, "stopped"), "b-async"), timeout_s=10, what="the async job to stop")
    assert Scripts(r, bulk).cancel_entry(plain, new_mark("ana", "mark only", now_iso(), "b-2"))[0] == b"cancelled"
    r.client_kill_filter(_type="pubsub")  # the worker subscribes again and reads the marks of what it runs
    wait_for(lambda: r.sismember(tkey(keys, "stopped"), "b-plain"), timeout_s=10, what="the plain job to stop")
    proc.terminate()
    assert proc.wait(30) == 0
    assert r.smembers(tkey(keys, "done")) == {b"b-kept"}  # the two removed never ran
    assert r.xpending(bulk.jobs, GROUP)["pending"] == 0 and r.xlen(bulk.dead) == 0 and r.zcard(bulk.delayed) == 0
    assert "sync_long b-plain (entry" in workers.log(proc) and "was cancelled by ana: mark only" in workers.log(proc)


def test_an_entry_read_ahead_and_cancelled_never_starts(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    """One slot held by a running job and one entry read ahead behind it: the entry is cancelled (pending to
    this worker: status cancelled), then the running job; the slot frees, and the entry read ahead is
    acknowledged without its handler ever being called (0 runs), never retried nor dead-lettered."""
    running = job_id_of(r, keys, enqueue(r, "async_long", {"sleep_s": "30"}, prefix=keys.prefix))
    settings = Settings.from_env(workers.env(KINDS, WORKER_CONCURRENCY="1", **SLOW_REFRESH))
    at = {"client": r, "prefix": keys.prefix}

    async def main() -> None:
        async with assembled(settings, settings.redis_url, settings.database_url, registry=registry_of(KINDS)) as w:
            run = asyncio.create_task(w.run())
            await until(lambda: r.sismember(tkey(keys, "started"), running))
            ahead = job_id_of(r, keys, enqueue(r, "quick", {}, prefix=keys.prefix))
            part = w.parts[0]
            w.slots.ahead.extend((part, entry, raw, time.monotonic()) for entry, raw in await part.read(1, block=False))
            assert len(w.slots.ahead) == 1
            statuses = [opslib.cancel(job_id, reason="INC-2222", **at)["status"][0] for job_id in (ahead, running)]
            assert statuses == ["cancelled", "cancelled"]
            await until(lambda: r.xpending(keys.jobs, GROUP)["pending"] == 0)
            assert not w.slots.ahead and r.scard(tkey(keys, "done")) == 0  # acknowledged, never run
            w.stop()
            await run

    asyncio.run(main())
    assert r.xlen(keys.dead) == 0 and r.zcard(keys.delayed) == 0
    assert r.smembers(tkey(keys, "stopped")) == {running.encode()}


async def until(predicate: Callable[[], object], timeout_s: float = 10) -> None:
    """Poll ``predicate`` from a coroutine (the worker runs on the same loop) until true, or fail."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)
