"""Fenced settles against a real server: a worker whose claim was taken over changes nothing.

Worker A reads an entry, its claim goes idle, worker B's reclaim takes it
over (XCLAIM); A's ack (batched with its next read, or alone), retry and
dead letter then land nowhere: the entry stays B's, pending, no delayed
member and no dead entry appear, and A counts the dropped settle and says
so once. B's own settle lands.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest
import redis
import redis.asyncio as aioredis

from worker.kinds import Registry, job_kind
from worker.loop.outcomes import Outcomes
from worker.loop.partition_reader import PartitionReader
from worker.retry import RetryPolicy
from worker.settings import Settings
from worker.store import wire
from worker.store.keys import GROUP, Keys
from worker.store.scripts import Scripts

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
