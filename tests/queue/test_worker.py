"""The worker against a real server: outcomes and limits in this process (``run_worker``); crashes and
shutdown as a real process."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time

import pytest
import redis
import redis.asyncio as aioredis

from tests.helpers import Workers, wait_for
from worker.kinds import Registry
from worker.loop.runner import Worker
from worker.settings import Settings
from worker.store.enqueue import enqueue
from worker.store.heartbeats import live_workers
from worker.store.keys import GROUP, Keys

KINDS = "tests.queue.kinds_basic"
FAST_RECLAIM = {"RECLAIM_IDLE_MS": "600", "RECLAIM_INTERVAL_S": "0.2"}


def tkey(keys: Keys, name: str) -> str:
    return f"{keys.prefix}test:{name}"


def dead_entries(r: redis.Redis, keys: Keys) -> list[dict[str, str]]:
    return [{k.decode(): v.decode() for k, v in f.items()} for _, f in r.xrange(keys.dead)]


def test_async_and_sync_handlers_succeed_and_are_acknowledged(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    ids = [enqueue(r, kind, {"n": i}, prefix=keys.prefix) for i in range(30) for kind in ("noop", "sync_noop")]
    workers.here(KINDS)
    assert r.scard(tkey(keys, "done")) == len(ids)
    assert r.xpending(keys.jobs, GROUP)["pending"] == 0
    assert r.xlen(keys.dead) == 0


@pytest.mark.parametrize(
    ("kind", "attempts"),
    [("fail_none", 1), ("fail_once_retried", 2), ("fail_five_retries", 6)],
)
def test_each_policy_makes_its_attempts_then_dead_letters(
    r: redis.Redis, keys: Keys, workers: Workers, kind: str, attempts: int
) -> None:
    entry = enqueue(r, kind, {"order_id": "4471", "request_id": "7f3a9c2e", "trace": "4bf92f35"}, prefix=keys.prefix)
    job_id = r.xrange(keys.jobs, entry, entry)[0][1][b"job_id"].decode()
    workers.here(KINDS)
    assert int(r.get(tkey(keys, f"attempts:{job_id}"))) == attempts
    [dead] = dead_entries(r, keys)
    assert dead["kind"] == kind
    assert dead["job_id"] == job_id
    assert dead["attempts"] == str(attempts)
    assert dead["reason"] == "exhausted"
    assert dead["error"] == "ValueError: order 4471 failed on purpose"
    assert 'raise ValueError(f"order' in dead["traceback"]
    assert (dead["request_id"], dead["trace"]) == ("7f3a9c2e", "4bf92f35")
    assert dead["failed_at"].endswith("Z")
    assert dead["worker"]
    assert r.zcard(keys.delayed) == 0
    assert r.xpending(keys.jobs, GROUP)["pending"] == 0


def test_an_error_the_policy_gives_up_on_is_dead_lettered_as_permanent_after_one_attempt(
    r: redis.Redis, keys: Keys, workers: Workers
) -> None:
    refused = enqueue(r, "refused_or_failing", {"order_id": "4471", "refuse": "yes"}, prefix=keys.prefix)
    failing = enqueue(r, "refused_or_failing", {"order_id": "4472"}, prefix=keys.prefix)
    job_ids = [r.xrange(keys.jobs, e, e)[0][1][b"job_id"].decode() for e in (refused, failing)]
    result = workers.here(KINDS)
    assert [int(r.get(tkey(keys, f"attempts:{job_id}"))) for job_id in job_ids] == [1, 6]
    by_order = {dead["order_id"]: dead for dead in dead_entries(r, keys)}
    assert by_order["4471"]["reason"] == "permanent"
    assert by_order["4471"]["attempts"] == "1"
    assert by_order["4471"]["error"] == "Refused: order 4471 refused for good"
    assert "raise Refused(" in by_order["4471"]["traceback"]
    assert (by_order["4472"]["reason"], by_order["4472"]["attempts"]) == ("exhausted", "6")
    assert re.search(rf"Job refused_or_failing {job_ids[0]} failed permanently on attempt 1 of 6 after", result.stdout)
    assert r.zcard(keys.delayed) == 0
    assert r.xpending(keys.jobs, GROUP)["pending"] == 0


def test_a_passing_condition_is_retried_until_it_succeeds(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    enqueue(r, "flaky_then_ok", {}, prefix=keys.prefix)
    result = workers.here(KINDS)
    assert r.scard(tkey(keys, "done")) == 1
    assert r.xlen(keys.dead) == 0
    assert result.stdout.count("retrying in") == 2
    assert re.search(
        r"failed on attempt 1 of 4 after \d+\.\d ms \(ConnectionError: mail provider answered 503\)", result.stdout
    )


def test_a_timeout_counts_as_a_failure(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    enqueue(r, "slow_with_timeout", {}, prefix=keys.prefix)
    workers.here(KINDS)
    [dead] = dead_entries(r, keys)
    assert dead["error"] == "JobTimeout: slow_with_timeout ran longer than its timeout of 0.2 s"


@pytest.mark.parametrize(
    ("fields", "reason", "named"),
    [
        ({b"order_id": b"4471"}, "malformed", "no 'kind' field"),
        ({b"kind": b"render_ticketz"}, "unknown_kind", "'render_ticketz' is not a kind"),
        ({b"kind": b"noop", b"attempts": b"x"}, "malformed", "got 'x'"),
        ({b"kind": b"noop", b"attempts": b"-3"}, "malformed", "got '-3'"),
        ({b"kind": b"noop", b"big": b"x" * 70_000}, "malformed", "70000 bytes"),
        ({b"kind": b"noop", b"bin": b"\x80\x81"}, "malformed", "not UTF-8"),
    ],
)
def test_malformed_entries_are_dead_lettered_with_their_reason_and_the_loop_goes_on(
    r: redis.Redis, keys: Keys, workers: Workers, fields: dict[bytes, bytes], reason: str, named: str
) -> None:
    r.xadd(keys.jobs, fields)
    enqueue(r, "noop", {}, prefix=keys.prefix)
    workers.here(KINDS)
    [(_, dead)] = r.xrange(keys.dead)
    assert dead[b"reason"] == reason.encode()
    assert named in dead[b"error"].decode()
    assert dead[b"attempts"] == b"0"
    for name, value in fields.items():  # the original is kept as it arrived
        if name != b"attempts":
            assert dead[name] == value
    assert r.scard(tkey(keys, "done")) == 1  # the next job ran


def test_concurrency_never_exceeds_the_slots(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    for _ in range(40):
        enqueue(r, "sleepy", {"sleep_s": "0.03"}, prefix=keys.prefix)
    workers.here(KINDS, WORKER_CONCURRENCY="3")
    assert r.scard(tkey(keys, "done")) == 40
    assert int(r.get(tkey(keys, "max_active"))) == 3


def test_delayed_jobs_run_at_their_time_not_before(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    member = enqueue(r, "stamp", {"n": 1}, delay_s=1.0, prefix=keys.prefix)
    job_id = json.loads(member)["job_id"]
    due = r.zscore(keys.delayed, member)
    workers.here(KINDS)
    ran_at = float(r.get(tkey(keys, f"ran_at:{job_id}")))
    assert due <= ran_at < due + 1.5
    assert r.zcard(keys.delayed) == 0


def test_a_long_job_is_not_stolen_from_a_live_worker(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    """A job three times longer than RECLAIM_IDLE_MS runs once; the second worker never claims it."""
    entry = enqueue(r, "sleepy", {"sleep_s": "1.8"}, prefix=keys.prefix)
    job_id = r.xrange(keys.jobs, entry, entry)[0][1][b"job_id"].decode()
    first = workers.start(KINDS, "--burst", **FAST_RECLAIM)
    wait_for(lambda: r.get(tkey(keys, f"runs:{job_id}")), what="the long job to start")
    second = workers.start(KINDS, WORKER_NAME="second-worker", **FAST_RECLAIM)
    assert first.wait(30) == 0
    # Its heartbeat starts after its signal handlers are set: a SIGTERM sooner would end it with -15.
    wait_for(lambda: "second-worker" in live_workers(r, keys), what="the second worker's heartbeat")
    second.send_signal(signal.SIGTERM)
    assert second.wait(30) == 0
    assert int(r.get(tkey(keys, f"runs:{job_id}"))) == 1
    assert r.scard(tkey(keys, "done")) == 1
    assert "Reclaimed" not in workers.log(second)


def test_poison_is_dead_lettered_after_exactly_three_deliveries(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    """The handler hangs; the worker is killed mid-job (SIGKILL) and restarted until reclaim buries it."""
    entry = enqueue(r, "hang", {"order_id": "x"}, prefix=keys.prefix)
    job_id = r.xrange(keys.jobs, entry, entry)[0][1][b"job_id"].decode()
    runs_key = tkey(keys, f"runs:{job_id}")
    for run in (1, 2, 3):
        proc = workers.start(KINDS, **FAST_RECLAIM)
        wait_for(lambda run=run: int(r.get(runs_key) or 0) == run, what=f"run {run} of the hanging job")
        proc.kill()
        proc.wait(10)
    last = workers.start(KINDS, **FAST_RECLAIM)
    wait_for(lambda: r.xlen(keys.dead) == 1, what="the poison entry to be dead-lettered")
    last.send_signal(signal.SIGTERM)
    assert last.wait(30) == 0
    assert int(r.get(runs_key)) == 3  # never a 4th run
    [dead] = dead_entries(r, keys)
    assert dead["reason"] == "poison"
    assert dead["attempts"] == "3"
    assert "delivered 3 times" in dead["error"]
    assert dead["job_id"] == job_id
    assert f"Job hang {job_id} (entry {entry}) killed its worker 3 times" in workers.log(last)
    assert r.xpending(keys.jobs, GROUP)["pending"] == 0


def test_a_crasher_among_innocents_leaves_exactly_one_dead_entry(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    """os._exit on one entry: the 20 jobs that shared the process run and are acknowledged."""
    for i in range(10):
        enqueue(r, "crash", {"n": i}, prefix=keys.prefix)
    crasher = enqueue(r, "crash", {"crash": "yes"}, prefix=keys.prefix)
    for i in range(10, 20):
        enqueue(r, "crash", {"n": i}, prefix=keys.prefix)
    crasher_id = r.xrange(keys.jobs, crasher, crasher)[0][1][b"job_id"].decode()
    for _ in range(6):  # restart the worker after each crash, as an orchestrator would
        proc = workers.start(KINDS, "--burst", **FAST_RECLAIM)
        if proc.wait(60) == 0:
            break
    assert proc.returncode == 0
    assert r.scard(tkey(keys, "done")) == 20
    [dead] = dead_entries(r, keys)
    assert dead["reason"] == "poison"
    assert dead["job_id"] == crasher_id
    assert int(r.get(tkey(keys, f"runs:{crasher_id}"))) == 3


def test_sigterm_stops_reading_lets_running_jobs_finish_and_exits_0(
    r: redis.Redis, keys: Keys, workers: Workers
) -> None:
    for _ in range(8):
        enqueue(r, "sleepy", {"sleep_s": "1.0"}, prefix=keys.prefix)
    proc = workers.start(KINDS, WORKER_CONCURRENCY="4")
    wait_for(lambda: r.scard(tkey(keys, "started")) == 4, what="4 jobs to start")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert r.scard(tkey(keys, "done")) == 4  # the running ones finished
    assert r.scard(tkey(keys, "started")) == 4  # nothing new was read
    assert r.xpending(keys.jobs, GROUP)["pending"] == 0
    assert r.xinfo_groups(keys.jobs)[0]["lag"] == 4


def test_sigterm_gives_back_jobs_longer_than_the_grace(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    enqueue(r, "sleepy", {"sleep_s": "30"}, prefix=keys.prefix)
    proc = workers.start(KINDS, SHUTDOWN_GRACE_S="0.5", RECLAIM_IDLE_MS="600000")
    wait_for(lambda: r.scard(tkey(keys, "started")) == 1, what="the long job to start")
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert time.monotonic() - started < 10
    (pending,) = r.xpending_range(keys.jobs, GROUP, min="-", max="+", count=10)
    assert pending["time_since_delivered"] >= 600_000  # given back: reclaimable at once, not in 10 minutes
    assert pending["times_delivered"] == 1  # the give-back is no delivery
    assert "Gave back 1 jobs told to stop" in workers.log(proc)


def test_the_jobs_stream_stays_bounded(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    pipe = r.pipeline(transaction=False)
    for i in range(3000):
        pipe.xadd(keys.jobs, {"kind": "noop", "job_id": f"j{i}", "attempts": "0"})
    pipe.execute()
    proc = workers.start(KINDS)
    wait_for(lambda: r.scard(tkey(keys, "done")) == 3000, what="3000 jobs")
    wait_for(lambda: r.xlen(keys.jobs) <= 1, what="the trim chore to drop acknowledged entries")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0


def test_a_fresh_consumer_name_per_process_and_the_group_is_created(
    r: redis.Redis, keys: Keys, workers: Workers
) -> None:
    enqueue(r, "noop", {}, prefix=keys.prefix)  # before any group exists
    workers.burst(KINDS)
    enqueue(r, "noop", {}, prefix=keys.prefix)
    workers.burst(KINDS)
    names = {c["name"].decode() for c in r.xinfo_consumers(keys.jobs, GROUP)}
    assert len(names) == 2
    assert r.scard(tkey(keys, "done")) == 2


def test_entries_given_back_by_a_stopping_worker_are_idle_at_once_and_keep_their_delivery_count(
    r: redis.Redis, keys: Keys, redis_url: str
) -> None:
    for n in range(3):
        enqueue(r, "stamp", {"n": n}, prefix=keys.prefix)
    idle_ms = 60_000

    async def main() -> None:
        client = aioredis.Redis.from_url(redis_url)
        env = {"QUEUE_PREFIX": keys.prefix, "WORKER_NAME": "ahead", "RECLAIM_IDLE_MS": str(idle_ms)}
        worker = Worker(client, Settings.from_env(env), Registry())
        try:
            await worker.ensure_group()
            part = worker.parts[0]
            entries = await part.read(3, block=False)
            await part.give_back([entry_id for entry_id, _raw in entries[1:]])
        finally:
            await client.aclose()

    asyncio.run(main())
    pending = r.xpending_range(keys.jobs, GROUP, "-", "+", 10)
    assert [p["times_delivered"] for p in pending] == [1, 1, 1]  # giving back is not a delivery
    assert pending[0]["time_since_delivered"] < idle_ms  # the one kept is still fresh
    assert all(p["time_since_delivered"] >= idle_ms for p in pending[1:])  # the next reclaim takes these
