"""Unique jobs and idempotent enqueue on a real Redis: a duplicate adds nothing and names the holder; the
lock lasts until the job's terminal state (succeeded, dead), or ``unique_for`` seconds from the enqueue;
a producer's job id given again within the window adds nothing; without either, two enqueues are two jobs."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter

import pytest
import redis
import redis.asyncio as aioredis

from tests.helpers import Workers, wait_for
from worker.store.enqueue import NewJob, enqueue, enqueue_async, enqueue_many, enqueue_many_async
from worker.store.keys import Keys
from worker.store.unique import IDEMPOTENCY_WINDOW_S
from worker.store.wire import decode_member

KINDS = "tests.queue.kinds_unique"


def records(r: redis.Redis, keys: Keys) -> list[dict[str, str]]:
    """Every record the handlers wrote, double writes included (:mod:`tests.queue.kinds_unique`)."""
    return [json.loads(run) for run in r.lrange(f"{keys.prefix}test:runs", 0, -1)]


def runs(r: redis.Redis, keys: Keys) -> list[str]:
    """The executions, ``<unique_key>:<job_id>`` each, in order: one per distinct token, so that a handler's
    RPUSH sent again after a timed-out reply counts once."""
    seen = {record["token"]: f"{record['key']}:{record['job_id']}" for record in records(r, keys)}
    return list(seen.values())


def double_writes(r: redis.Redis, keys: Keys) -> list[str]:
    """The tokens written more than once: one run whose record landed twice, never a second run."""
    tokens = Counter(record["token"] for record in records(r, keys))
    return [token for token, count in tokens.items() if count > 1]


def test_a_duplicate_adds_nothing_and_returns_the_holder(r: redis.Redis, keys: Keys) -> None:
    first = enqueue(r, "unique_ok", {"order_id": 4471}, unique_key="render:4471", prefix=keys.prefix)
    again = enqueue(r, "unique_ok", {"order_id": 4471}, unique_key="render:4471", prefix=keys.prefix)
    later = enqueue(r, "unique_ok", {}, unique_key="render:4471", delay_s=60, prefix=keys.prefix)
    other_kind = enqueue(r, "unique_fail", {}, unique_key="render:4471", prefix=keys.prefix)
    assert first == again == later != other_kind
    assert r.xlen(keys.jobs) == 2 and r.zcard(keys.delayed) == 0
    lock = r.hgetall(keys.unique("unique_ok", "render:4471"))
    assert lock[b"ref"].decode() == first and r.ttl(keys.unique("unique_ok", "render:4471")) == -1
    [(_, fields), _] = r.xrange(keys.jobs)
    assert fields[b"unique_key"] == b"render:4471" and fields[b"job_id"] == lock[b"job"]


def test_a_repeated_job_id_adds_nothing_for_now_and_later_and_keeps_the_due_time(r: redis.Redis, keys: Keys) -> None:
    now_id = enqueue(r, "unique_ok", {"n": 1}, job_id="mail-1", prefix=keys.prefix)
    assert enqueue(r, "unique_ok", {"n": 2}, job_id="mail-1", prefix=keys.prefix) == now_id
    assert enqueue(r, "unique_ok", {"job_id": "mail-1"}, prefix=keys.prefix) == now_id
    member = enqueue(r, "unique_ok", {}, job_id="mail-2", delay_s=60, prefix=keys.prefix)
    assert enqueue(r, "unique_ok", {}, job_id="mail-2", delay_s=3600, prefix=keys.prefix) == member
    assert r.xlen(keys.jobs) == 1
    [(stored, due)] = r.zrange(keys.delayed, 0, -1, withscores=True)
    assert stored.decode() == member and due < time.time() + 120  # the first due time, not moved
    assert 0 < r.ttl(keys.enqueued("mail-2")) <= IDEMPOTENCY_WINDOW_S
    relayed = enqueue(r, "unique_ok", {"outbox_id": "77"}, prefix=keys.prefix)
    assert enqueue(r, "unique_ok", {"outbox_id": "77"}, prefix=keys.prefix) == relayed


def test_without_a_key_or_an_id_two_enqueues_are_two_jobs_for_now_and_later(r: redis.Redis, keys: Keys) -> None:
    run_at = time.time() + 60
    members = {enqueue(r, "unique_ok", {"order_id": 1}, run_at=run_at, prefix=keys.prefix) for _ in range(2)}
    ids = {enqueue(r, "unique_ok", {"order_id": 1}, prefix=keys.prefix) for _ in range(2)}
    assert len(members) == 2 and r.zcard(keys.delayed) == 2
    assert len(ids) == 2 and r.xlen(keys.jobs) == 2
    assert not list(r.scan_iter(match=f"{keys.prefix}enqueued:*")), "a minted id leaves no mark"


def test_duplicates_inside_one_batch_add_one_job(r: redis.Redis, keys: Keys) -> None:
    batch = [
        NewJob("unique_ok", {"n": 1}, unique_key="k"),
        NewJob("unique_ok", {"n": 2}, unique_key="k"),
        NewJob("unique_ok", {"n": 3}, job_id="j"),
        NewJob("unique_ok", {"n": 4}, job_id="j", delay_s=30),
        NewJob("unique_ok", {"n": 5}),
    ]
    first, second, third, fourth, fifth = enqueue_many(r, batch, prefix=keys.prefix)
    assert first == second and third == fourth and len({first, third, fifth}) == 3
    assert r.xlen(keys.jobs) == 3 and r.zcard(keys.delayed) == 0


def test_the_async_forms_guard_alike(r: redis.Redis, keys: Keys, redis_url: str) -> None:
    async def add() -> tuple[str, str, list[str]]:
        client = aioredis.Redis.from_url(redis_url)
        try:
            one = await enqueue_async(client, "unique_ok", {}, unique_key="a", prefix=keys.prefix)
            two = await enqueue_async(client, "unique_ok", {}, unique_key="a", delay_s=5, prefix=keys.prefix)
            batch = [NewJob("unique_ok", {}, job_id="b"), NewJob("unique_ok", {}, job_id="b")]
            return one, two, await enqueue_many_async(client, batch, prefix=keys.prefix)
        finally:
            await client.aclose()

    one, two, [three, four] = asyncio.run(add())
    assert one == two and three == four and r.xlen(keys.jobs) == 2


def test_bad_guards_are_refused_in_one_line(r: redis.Redis, keys: Keys) -> None:
    with pytest.raises(ValueError, match="unique_for must be a number of seconds > 0 given with a unique_key"):
        enqueue(r, "unique_ok", {}, unique_for=10, prefix=keys.prefix)
    with pytest.raises(ValueError, match="unique_key must be a non-empty string"):
        enqueue(r, "unique_ok", {}, unique_key="", prefix=keys.prefix)
    assert r.xlen(keys.jobs) == 0


def test_success_and_death_release_the_key_and_retries_keep_it(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    enqueue(r, "unique_ok", {}, unique_key="ok", prefix=keys.prefix)
    enqueue(r, "unique_fail", {}, unique_key="dead", prefix=keys.prefix)
    workers.burst(KINDS)
    assert sorted(run.split(":")[0] for run in runs(r, keys)) == ["dead", "dead", "ok"]  # a retry kept the key
    assert not r.exists(keys.unique("unique_ok", "ok"), keys.unique("unique_fail", "dead"))
    [(_, dead)] = r.xrange(keys.dead)
    assert dead[b"unique_key"] == b"dead"
    again = enqueue(r, "unique_ok", {}, unique_key="ok", prefix=keys.prefix)
    assert again.encode() == r.xrange(keys.jobs, "-", "+")[-1][0]


def test_unique_for_holds_the_key_past_the_success_then_lets_go(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    lock = keys.unique("unique_ok", "nightly")
    first = enqueue(r, "unique_ok", {}, unique_key="nightly", unique_for=4, prefix=keys.prefix)
    workers.burst(KINDS)
    assert len(runs(r, keys)) == 1
    assert 0 < r.pttl(lock) <= 4000, "held until 4 s after the enqueue"
    assert enqueue(r, "unique_ok", {}, unique_key="nightly", prefix=keys.prefix) == first
    wait_for(lambda: not r.exists(lock), timeout_s=10, what="the unique_for lock to expire")
    assert enqueue(r, "unique_ok", {}, unique_key="nightly", prefix=keys.prefix) != first


def test_a_long_job_keeps_its_key_past_unique_for(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    lock = keys.unique("unique_slow", "long")
    first = enqueue(r, "unique_slow", {}, unique_key="long", unique_for=0.2, prefix=keys.prefix)
    proc = workers.start(KINDS)
    wait_for(lambda: runs(r, keys), what="the job to start")
    held_until = int(r.hget(lock, "until") or 0)
    wait_for(lambda: r.time()[0] * 1000 > held_until + 100, timeout_s=5, what="unique_for to pass")
    assert r.exists(lock) and r.pttl(lock) == -1
    assert enqueue(r, "unique_slow", {}, unique_key="long", prefix=keys.prefix) == first
    r.set(f"{keys.prefix}test:gate", 1)
    wait_for(lambda: not r.exists(lock), what="the settle to release the lock")
    proc.terminate()
    proc.wait(30)
    assert json.loads(json.dumps(runs(r, keys)))[0].startswith("long:")


def test_a_delayed_duplicate_does_not_move_the_holder(r: redis.Redis, keys: Keys) -> None:
    member = enqueue(r, "unique_ok", {}, unique_key="soon", delay_s=30, prefix=keys.prefix)
    assert enqueue(r, "unique_ok", {}, unique_key="soon", delay_s=3000, prefix=keys.prefix) == member
    assert decode_member(member)["unique_key"] == "soon"
    assert r.zscore(keys.delayed, member) < time.time() + 60


def test_an_entry_buried_unparsed_releases_its_key(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    r.xadd(keys.jobs, {"kind": "unique_ok", "job_id": "bad", "attempts": "many", "unique_key": "m"})
    r.hset(keys.unique("unique_ok", "m"), mapping={"job": "bad", "ref": "0-1", "at": 0})
    workers.burst(KINDS)
    [(_, dead)] = r.xrange(keys.dead)
    assert dead[b"reason"] == b"malformed" and not r.exists(keys.unique("unique_ok", "m"))


def test_jobs_due_at_the_same_moment_run_in_enqueue_order(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    due = time.time() - 1  # due at once: promoted in one batch, by score
    for i in range(10):
        enqueue(r, "unique_ok", {}, job_id=f"j{9 - i}", run_at=due, prefix=keys.prefix)  # ids against the order
    enqueue_many(
        r, [NewJob("unique_ok", {}, run_at=due, unique_key=f"k{9 - i}") for i in range(10)], prefix=keys.prefix
    )
    scores = [score for _, score in r.zrange(keys.delayed, 0, -1, withscores=True)]
    assert len(set(scores)) == 20 and max(scores) - due < 0.001
    workers.burst(KINDS, WORKER_CONCURRENCY="1")
    order = [run.split(":")[1] if run.startswith(":") else run.split(":")[0] for run in runs(r, keys)]
    assert order == [f"j{9 - i}" for i in range(10)] + [f"k{9 - i}" for i in range(10)]


def test_a_fair_job_keeps_its_guards_a_repeated_id_or_a_held_key_adds_nothing(r: redis.Redis, keys: Keys) -> None:
    r.xgroup_create(keys.jobs, "workers", id="$", mkstream=True)
    r.xadd(keys.jobs, {"kind": "unique_ok"})  # undelivered: the fair jobs wait for their turn
    first = enqueue(r, "unique_ok", {"n": 1}, fair_key="org-1", job_id="mail-9", prefix=keys.prefix)
    assert enqueue(r, "unique_ok", {"n": 2}, fair_key="org-1", job_id="mail-9", prefix=keys.prefix) == first
    held = enqueue(r, "unique_ok", {}, fair_key="org-2", unique_key="render:1", prefix=keys.prefix)
    assert enqueue(r, "unique_ok", {}, fair_key="org-3", unique_key="render:1", prefix=keys.prefix) == held
    waiting = [decode_member(m) for m in r.zrange(keys.fair_queue, 0, -1)]
    assert [(job["job_id"], job["fair_key"]) for job in waiting] == [("mail-9", "org-1"), (held, "org-2")]
    assert r.xlen(keys.jobs) == 1 and r.hget(keys.unique("unique_ok", "render:1"), "job").decode() == held
