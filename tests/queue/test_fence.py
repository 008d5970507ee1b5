"""Fenced settles against a real server: a worker whose claim was taken over changes nothing.

Worker A reads an entry, its claim goes idle, worker B's reclaim takes it
over (XCLAIM); A's ack (batched with its next read, alone, or with a unique
key's release), retry, dead letter, park, throttle deferral and hand-back
then land nowhere: the entry stays B's, pending, no delayed, parked,
throttled or dead entry appears, a unique key stays held, and A counts the
dropped settle and says so once. B's own settle lands. The gate's moves
ride out a lost connection as the outcomes do.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from urllib.parse import urlparse

import pytest
import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from tests.faults.helpers_proxy import Proxy
from worker.kinds import Registry, job_kind
from worker.loop.gate import Gate
from worker.loop.handback import HandBack
from worker.loop.outcomes import Outcomes
from worker.loop.partition_reader import PartitionReader
from worker.observability.metrics import Metrics
from worker.retry import RetryPolicy
from worker.settings import Settings
from worker.store import wire
from worker.store.enqueue import enqueue
from worker.store.keys import GROUP, Keys
from worker.store.scripts import Scripts
from worker.store.server_clock import CLOCK
from worker.store.unique import lock_of

REGISTRY = Registry()


@job_kind("flaky", retry=RetryPolicy(retries=3, base_s=60.0, cap_s=60.0), registry=REGISTRY)
async def flaky(job: object) -> None:
    raise ValueError("down")


@job_kind("doomed", retry=RetryPolicy(retries=0), registry=REGISTRY)
async def doomed(job: object) -> None:
    raise ValueError("down")


class Consumer:
    """One worker's partition reader and outcomes, as the loop has them."""

    def __init__(self, client: aioredis.Redis, keys: Keys, name: str) -> None:
        settings = Settings.from_env({"QUEUE_PREFIX": keys.prefix, "WORKER_NAME": name})
        self.outcomes = Outcomes(client, Scripts(client, keys), settings, (), promote_soon=lambda _s: None)
        self.reader = PartitionReader(client, self.outcomes, name, block_ms=10)

    async def take(self, entry_id: str, r: redis.Redis) -> wire.Job:
        """Read one entry (it must be ``entry_id``) and parse it."""
        [(got, raw)] = await self.reader.read(1, block=False)
        assert got == entry_id
        job = wire.parse_entry(got, raw, REGISTRY.kinds, 1 << 20, 1 << 20)
        assert isinstance(job, wire.Job)
        return job


def run(redis_url: str, scenario: Callable[[aioredis.Redis], Awaitable[None]]) -> None:
    """``scenario(client)`` on an asyncio client of its own (the loop's kind of client)."""

    async def main() -> None:
        client = aioredis.Redis.from_url(redis_url)
        try:
            await scenario(client)
        finally:
            await client.aclose()

    asyncio.run(main())


def owner(r: redis.Redis, keys: Keys, entry_id: str) -> bytes | None:
    found = r.xpending_range(keys.jobs, GROUP, entry_id, entry_id, 1)
    return found[0]["consumer"] if found else None


async def taken_over(r: redis.Redis, keys: Keys, client: aioredis.Redis, kind: str) -> tuple[Consumer, wire.Job]:
    """A read ``kind``'s new entry (the job returned) as worker A; B's reclaim then took it over."""
    r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
    entry_id = r.xadd(keys.jobs, {"kind": kind, "job_id": f"{kind}-1", "attempts": "0"}).decode()
    a = Consumer(client, keys, "worker-a")
    job = await a.take(entry_id, r)
    r.xclaim(keys.jobs, GROUP, "worker-b", 0, [entry_id], justid=True)
    return a, job


def test_a_stale_batched_ack_changes_nothing_and_is_counted_once(
    redis_url: str, r: redis.Redis, keys: Keys, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(client: aioredis.Redis) -> None:
        a, job = await taken_over(r, keys, client, "flaky")
        entry_id = job.entry_id
        a.outcomes.succeeded(job, 0.01)
        with caplog.at_level(logging.WARNING, logger="worker"):
            assert await a.reader.read(10, block=False) == []  # the ack rides with this read (the hot path)
        assert owner(r, keys, entry_id) == b"worker-b"
        assert a.outcomes.stale.count == 1 and not a.outcomes.acks
        [line] = [rec.getMessage() for rec in caplog.records if "Dropped the ack" in rec.getMessage()]
        assert entry_id in line
        # B's own ack lands.
        b = Consumer(client, keys, "worker-b")
        b.outcomes.succeeded(job, 0.01)
        await b.outcomes.flush_kept(entry_id)
        assert owner(r, keys, entry_id) is None and b.outcomes.stale.count == 0

    run(redis_url, scenario)


def test_an_ack_batch_lands_for_the_entries_still_ours(redis_url: str, r: redis.Redis, keys: Keys) -> None:
    async def scenario(client: aioredis.Redis) -> None:
        r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
        ids = [r.xadd(keys.jobs, {"kind": "flaky", "job_id": f"j{i}", "attempts": "0"}).decode() for i in range(3)]
        a = Consumer(client, keys, "worker-a")
        read = await a.reader.read(3, block=False)
        r.xclaim(keys.jobs, GROUP, "worker-b", 0, [ids[1]], justid=True)
        for entry_id, raw in read:
            job = wire.parse_entry(entry_id, raw, REGISTRY.kinds, 1 << 20, 1 << 20)
            assert isinstance(job, wire.Job)
            a.outcomes.succeeded(job, 0.01)
        await a.reader.read(1, block=False)
        assert [owner(r, keys, entry_id) for entry_id in ids] == [None, b"worker-b", None]
        assert a.outcomes.stale.count == 1

    run(redis_url, scenario)


def test_a_stale_alone_ack_changes_nothing(redis_url: str, r: redis.Redis, keys: Keys) -> None:
    async def scenario(client: aioredis.Redis) -> None:
        a, job = await taken_over(r, keys, client, "flaky")
        entry_id = job.entry_id
        a.outcomes.succeeded(job, 0.01)
        await a.outcomes.flush_kept(entry_id)  # an entry run alone is acknowledged at once
        assert owner(r, keys, entry_id) == b"worker-b" and a.outcomes.stale.count == 1

    run(redis_url, scenario)


def test_a_stale_retry_adds_no_delayed_member(redis_url: str, r: redis.Redis, keys: Keys) -> None:
    async def scenario(client: aioredis.Redis) -> None:
        a, job = await taken_over(r, keys, client, "flaky")
        entry_id = job.entry_id
        await a.outcomes.failed(REGISTRY.kinds["flaky"], job, ValueError("down"), 0.01)
        assert r.zcard(keys.delayed) == 0, "a stale retry would run the job a third time"
        assert owner(r, keys, entry_id) == b"worker-b" and a.outcomes.stale.count == 1

    run(redis_url, scenario)


def test_a_stale_dead_letter_adds_no_dead_entry(redis_url: str, r: redis.Redis, keys: Keys) -> None:
    async def scenario(client: aioredis.Redis) -> None:
        a, job = await taken_over(r, keys, client, "doomed")
        entry_id = job.entry_id
        await a.outcomes.failed(REGISTRY.kinds["doomed"], job, ValueError("down"), 0.01)
        assert r.xlen(keys.dead) == 0, "a stale dead letter would stay in jobs:dead after B completed the job"
        assert owner(r, keys, entry_id) == b"worker-b" and a.outcomes.stale.count == 1
        # B's own dead letter lands.
        b = Consumer(client, keys, "worker-b")
        await b.outcomes.failed(REGISTRY.kinds["doomed"], job, ValueError("down"), 0.01)
        assert r.xlen(keys.dead) == 1 and owner(r, keys, entry_id) is None

    run(redis_url, scenario)


def test_the_read_loads_the_ack_script_after_a_script_flush(redis_url: str, r: redis.Redis, keys: Keys) -> None:
    """A server without the script (SCRIPT FLUSH, a restart) loses neither the read nor the acks."""

    async def scenario(client: aioredis.Redis) -> None:
        r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
        first = r.xadd(keys.jobs, {"kind": "flaky", "job_id": "j1", "attempts": "0"}).decode()
        a = Consumer(client, keys, "worker-a")
        job = await a.take(first, r)
        a.outcomes.succeeded(job, 0.01)
        await client.script_flush()
        second = r.xadd(keys.jobs, {"kind": "flaky", "job_id": "j2", "attempts": "0"}).decode()
        await a.take(second, r)  # the read still returns its entry, and the ack lands
        assert owner(r, keys, first) is None and not a.outcomes.acks and a.outcomes.stale.count == 0

    run(redis_url, scenario)


def test_a_stale_ack_of_a_unique_job_changes_nothing_and_keeps_its_lock(
    redis_url: str, r: redis.Redis, keys: Keys
) -> None:
    """The success of a job holding a unique key (``ack_unique.lua``) is fenced too: the entry stays B's and
    the key stays held by the job; B's own success acknowledges it and releases the key."""

    async def scenario(client: aioredis.Redis) -> None:
        r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
        entry_id = enqueue(r, "flaky", {}, unique_key="order-7", prefix=keys.prefix)
        a = Consumer(client, keys, "worker-a")
        job = await a.take(entry_id, r)
        lock = lock_of(keys, job.fields)
        assert lock and r.hget(lock, "job") == job.job_id.encode()
        r.xclaim(keys.jobs, GROUP, "worker-b", 0, [entry_id], justid=True)
        a.outcomes.succeeded(job, 0.01)
        await a.outcomes.flush_kept(entry_id)
        assert owner(r, keys, entry_id) == b"worker-b" and a.outcomes.stale.count == 1
        assert r.hget(lock, "job") == job.job_id.encode(), "a stale success released the job's unique key"
        b = Consumer(client, keys, "worker-b")
        b.outcomes.succeeded(job, 0.01)
        await b.outcomes.flush_kept(entry_id)
        assert owner(r, keys, entry_id) is None and not r.exists(lock) and b.outcomes.stale.count == 0

    run(redis_url, scenario)


def test_a_stale_park_changes_nothing(redis_url: str, r: redis.Redis, keys: Keys) -> None:
    """A paused kind's job parked by a worker whose claim was taken over: not acknowledged, not parked."""

    async def scenario(client: aioredis.Redis) -> None:
        a, job = await taken_over(r, keys, client, "flaky")
        r.hset(keys.paused, "flaky", json.dumps({"by": "test", "reason": "fence"}))
        gate = Gate(client, keys, keys, REGISTRY)
        await gate.refresh()
        assert not await gate.admit(a.reader, job)
        assert r.zcard(keys.parked) == 0, "a stale park would run the job again at the resume"
        assert owner(r, keys, job.entry_id) == b"worker-b" and a.outcomes.stale.count == 1
        b = Consumer(client, keys, "worker-b")
        assert not await gate.admit(b.reader, job)  # B's own park lands
        assert r.zcard(keys.parked) == 1 and owner(r, keys, job.entry_id) is None

    run(redis_url, scenario)


def test_a_stale_throttle_deferral_changes_nothing(redis_url: str, r: redis.Redis, keys: Keys) -> None:
    """A throttled job deferred to its later turn by a worker whose claim was taken over: nothing moves."""

    async def scenario(client: aioredis.Redis) -> None:
        a, job = await taken_over(r, keys, client, "flaky")
        r.hset(keys.throttles, "flaky", json.dumps({"per_s": 0.01}))
        gate = Gate(client, keys, keys, REGISTRY)
        await gate.refresh()
        assert (await a.reader.scripts.take_token("flaky", None, "", 0.05))[0] == b"0"  # now's turn is taken
        assert not await gate.admit(a.reader, job)  # the next turn is 100 s away: a deferral, which is stale
        assert r.zcard(keys.throttled) == 0 and a.outcomes.stale.count == 1
        assert owner(r, keys, job.entry_id) == b"worker-b"

    run(redis_url, scenario)


def test_a_stale_hand_back_changes_nothing(redis_url: str, r: redis.Redis, keys: Keys) -> None:
    """A payload version above this worker's, handed back by a worker whose claim was taken over: the entry
    stays B's and no copy appears."""

    async def scenario(client: aioredis.Redis) -> None:
        r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
        entry_id = r.xadd(keys.jobs, {"kind": "flaky", "job_id": "v9", "attempts": "0", "v": "9"}).decode()
        a = Consumer(client, keys, "worker-a")
        [(_got, raw)] = await a.reader.read(1, block=False)
        job = wire.parse_entry(entry_id, raw, REGISTRY.kinds, 1 << 20, 1 << 20)
        assert isinstance(job, wire.Job)
        r.xclaim(keys.jobs, GROUP, "worker-b", 0, [entry_id], justid=True)
        assert await HandBack(None).fit(a.reader, REGISTRY.kinds["flaky"], job, raw) is None
        assert r.xlen(keys.jobs) == 1 and r.zcard(keys.delayed) == 0, "a stale hand-back would copy the job"
        assert owner(r, keys, entry_id) == b"worker-b" and a.outcomes.stale.count == 1

    run(redis_url, scenario)


def test_a_park_whose_connection_is_lost_waits_and_lands(redis_url: str, r: redis.Redis, keys: Keys) -> None:
    """The gate's moves follow the one rule for a lost connection: a park whose reply does not come (a frozen
    network, no retry left in the client) waits in the episode, and lands once Redis answers again."""
    r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
    entry_id = r.xadd(keys.jobs, {"kind": "flaky", "job_id": "p1", "attempts": "0"}).decode()
    r.hset(keys.paused, "flaky", json.dumps({"by": "test", "reason": "network"}))
    port = urlparse(redis_url).port
    assert port is not None
    proxy = Proxy(port)

    async def scenario() -> None:
        client = aioredis.Redis.from_url(proxy.url, socket_timeout=0.3, retry=Retry(NoBackoff(), 0))
        try:
            a = Consumer(client, keys, "worker-a")
            job = await a.take(entry_id, r)
            gate = Gate(client, keys, keys, REGISTRY)
            await gate.refresh()
            proxy.freeze()
            admitted = asyncio.create_task(gate.admit(a.reader, job))
            deadline = time.monotonic() + 10
            while a.outcomes.episode.waiting == 0 and not admitted.done() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)  # polling the episode, with a deadline
            assert a.outcomes.episode.waiting == 1, admitted
            proxy.thaw()
            assert await asyncio.wait_for(admitted, 15) is False
            assert r.zcard(keys.parked) == 1 and owner(r, keys, entry_id) is None
            assert a.outcomes.episode.waiting == 0 and a.outcomes.stale.count == 0
        finally:
            await client.aclose()

    try:
        asyncio.run(scenario())
    finally:
        proxy.stop()


def test_the_stale_settles_and_the_clock_s_offset_are_metrics(
    redis_url: str, r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``<ns>_settles_stale_total`` counts the settles the fence dropped, ``<ns>_clock_offset_seconds`` is
    Redis's clock minus this machine's as last measured (here a machine 130 s ahead)."""

    async def scenario(client: aioredis.Redis) -> None:
        metrics = Metrics(Settings.from_env({"QUEUE_PREFIX": keys.prefix}), client, REGISTRY)
        a, job = await taken_over(r, keys, client, "flaky")
        metrics.watch_stale(lambda: a.outcomes.stale.count)
        a.outcomes.succeeded(job, 0.01)
        await a.outcomes.flush_kept(job.entry_id)
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + 130)
        try:
            await CLOCK.measure(client)
            sample = metrics.registry.get_sample_value
            labels = {"queue": keys.prefix}  # a worker-wide series: QUEUE_PREFIX is its queue label
            assert sample("worker_settles_stale_total", labels) == 1
            offset = sample("worker_clock_offset_seconds", labels)
            assert offset is not None and -131 < offset < -129
        finally:
            monkeypatch.undo()
            CLOCK.offset_s = 0.0

    run(redis_url, scenario)


def test_a_give_back_leaves_an_entry_another_worker_took_over(redis_url: str, r: redis.Redis, keys: Keys) -> None:
    """Entries given back (a stop, a scale-down) are made idle for the reclaim loop only while still this
    worker's: one that B took over stays B's, not idle, so it is not taken from B and run again."""

    async def scenario(client: aioredis.Redis) -> None:
        r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
        ids = [r.xadd(keys.jobs, {"kind": "flaky", "job_id": f"g{i}", "attempts": "0"}).decode() for i in range(2)]
        a = Consumer(client, keys, "worker-a")
        assert len(await a.reader.read(2, block=False)) == 2
        r.xclaim(keys.jobs, GROUP, "worker-b", 0, [ids[1]], justid=True)
        await a.reader.give_back(ids, idle_ms=600_000)
        mine, taken = (r.xpending_range(keys.jobs, GROUP, i, i, 1)[0] for i in ids)
        assert mine["consumer"] == b"worker-a" and mine["time_since_delivered"] >= 600_000
        assert taken["consumer"] == b"worker-b" and taken["time_since_delivered"] < 60_000
        assert taken["times_delivered"] == 1  # a give-back counts no delivery

    run(redis_url, scenario)
