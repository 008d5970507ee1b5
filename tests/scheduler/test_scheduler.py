"""The scheduler against a real Redis with injected clocks: exactly once per tick,
skewed and late workers, DST days, catch-up and none, the chore's wiring."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable, Coroutine
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis
import redis.asyncio as aioredis

from worker.app import WorkerApp
from worker.errors import UnknownKind
from worker.kinds import Registry, job_kind
from worker.loop.scheduler import MAX_CLOCK_SKEW_S, Scheduler, scheduler_chore
from worker.schedules import Schedule, iso_utc, schedule
from worker.settings import Settings
from worker.store.keys import Keys

PRAGUE = ZoneInfo("Europe/Prague")


class Clock:
    """Simulated real time; each worker reads it with its own skew."""

    def __init__(self, start: float) -> None:
        self.now = start

    def skewed(self, skew_s: float) -> Callable[[], float]:
        return lambda: self.now + skew_s


def run(coro: Callable[[aioredis.Redis], Coroutine[Any, Any, Any]], redis_url: str) -> Any:
    async def main() -> Any:
        client = aioredis.Redis.from_url(redis_url)
        try:
            return await coro(client)
        finally:
            await client.aclose()

    return asyncio.run(main())


def enqueued(r: redis.Redis, keys: Keys) -> list[dict[str, str]]:
    return [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in r.xrange(keys.jobs)]


def schedulers(client: aioredis.Redis, keys: Keys, s: Schedule, clock: Clock, skews: list[float]) -> list[Scheduler]:
    return [
        Scheduler(client, keys, [s], owner=f"w{i}", clock=clock.skewed(skew), default_tz="UTC")
        for i, skew in enumerate(skews)
    ]


def test_three_skewed_late_workers_enqueue_each_of_600_ticks_exactly_once(
    r: redis.Redis, keys: Keys, redis_url: str
) -> None:
    s = Schedule("tick", "tick", every_s=1)
    start = 1_800_000_000.0
    rng = random.Random(7)

    async def simulate(client: aioredis.Redis) -> Counter[str]:
        clock = Clock(start)
        workers = schedulers(client, keys, s, clock, [-5.0, 0.3, 5.0])
        next_wake = [start + rng.uniform(0, 1) for _ in workers]
        won: Counter[str] = Counter()
        while clock.now < start + 600:
            i = min(range(len(workers)), key=next_wake.__getitem__)
            clock.now = next_wake[i]
            won[workers[i].owner] += await workers[i].wake()
            late = rng.uniform(0, 4) if rng.random() < 0.05 else 0.0  # now and then a wake is seconds late
            next_wake[i] = clock.now + rng.uniform(0.9, 1.1) + late
        return won

    won = run(simulate, redis_url)
    jobs = enqueued(r, keys)
    ticks = Counter(job["scheduled_for"] for job in jobs)
    expected = {iso_utc(t) for t in range(int(start) + 6, int(start) + 594)}
    assert expected <= set(ticks), f"missed ticks: {sorted(expected - set(ticks))[:5]}"
    assert set(ticks.values()) == {1}, [t for t, n in ticks.items() if n > 1][:5]
    assert len({job["job_id"] for job in jobs}) == len(jobs)
    assert sum(won.values()) == len(jobs)


def test_a_worker_whose_clock_is_behind_finds_the_lock_still_there(r: redis.Redis, keys: Keys, redis_url: str) -> None:
    s = Schedule("tick", "tick", every_s=60)
    tick = 1_800_000_000.0

    async def scenario(client: aioredis.Redis) -> tuple[int, int, int]:
        clock = Clock(tick + 0.5)
        ahead, behind = schedulers(client, keys, s, clock, [MAX_CLOCK_SKEW_S, -MAX_CLOCK_SKEW_S])
        first = await ahead.wake()
        ttl = await client.ttl(keys.sched("tick", int(tick)))
        clock.now = tick + 2 * MAX_CLOCK_SKEW_S + 1
        return first, await behind.wake(), ttl

    first, second, ttl = run(scenario, redis_url)
    assert (first, second) == (1, 0)
    assert ttl > 60 + 60 + 2 * MAX_CLOCK_SKEW_S - 5
    assert [job["scheduled_for"] for job in enqueued(r, keys)] == [iso_utc(tick)]


def test_job_fields(r: redis.Redis, keys: Keys, redis_url: str) -> None:
    s = Schedule("nightly", "reconcile", cron="0 3 * * *", fields={"region": "cz"}, catch_up_s=0)
    tick = datetime(2026, 6, 1, 3, tzinfo=ZoneInfo("UTC")).timestamp()

    async def scenario(client: aioredis.Redis) -> None:
        clock = Clock(tick - 0.5)
        (worker,) = schedulers(client, keys, s, clock, [0.0])
        await worker.wake()
        clock.now = tick + 0.7
        await worker.wake()

    run(scenario, redis_url)
    (job,) = enqueued(r, keys)
    assert job.pop("job_id").isalnum()
    assert job == {
        "kind": "reconcile",
        "attempts": "0",
        "scheduled_for": "2026-06-01T03:00:00Z",
        "schedule": "nightly",
        "region": "cz",
    }
    assert r.get(keys.sched("nightly", int(tick))) == b"w0"


@pytest.mark.parametrize("day", [(2026, 3, 29), (2026, 10, 25)])
def test_dst_days_three_skewed_workers_run_a_prague_0300_job_once_a_day(
    r: redis.Redis, keys: Keys, redis_url: str, day: tuple[int, int, int]
) -> None:
    s = Schedule("reconcile", "reconcile", cron="0 3 * * *", tz="Europe/Prague", catch_up_s=0)
    start = (datetime(*day, tzinfo=PRAGUE) - timedelta(days=2)).timestamp()

    async def simulate(client: aioredis.Redis) -> None:
        clock = Clock(start)
        workers = schedulers(client, keys, s, clock, [-5.0, 0.0, 5.0])
        while clock.now < start + 5 * 86_400:
            clock.now += 45.0  # wakes far apart: each must still see every tick once
            for worker in workers:
                await worker.wake()

    run(simulate, redis_url)
    ticks = [datetime.fromisoformat(job["scheduled_for"].replace("Z", "+00:00")) for job in enqueued(r, keys)]
    local_days = Counter(t.astimezone(PRAGUE).date() for t in ticks)
    assert len(local_days) == 5 and set(local_days.values()) == {1}
    assert all(t.astimezone(PRAGUE).hour == 3 for t in ticks)


def test_catch_up_after_downtime_enqueues_the_missed_tick_once(r: redis.Redis, keys: Keys, redis_url: str) -> None:
    s = Schedule("expire", "expire", every_s=60)
    tick = 1_800_000_000.0

    async def scenario(client: aioredis.Redis) -> list[int]:
        clock = Clock(tick + 30)  # no worker ran at the tick; two start 30 and 40 s later
        first, second = schedulers(client, keys, s, clock, [0.0, 0.0])
        won = [await first.wake()]
        clock.now = tick + 40
        won.append(await second.wake())
        return won

    assert run(scenario, redis_url) == [1, 0]
    assert [job["scheduled_for"] for job in enqueued(r, keys)] == [iso_utc(tick)]


def test_catch_up_reaches_back_one_interval_only(r: redis.Redis, keys: Keys, redis_url: str) -> None:
    s = Schedule("expire", "expire", every_s=60)
    tick = 1_800_000_000.0

    async def scenario(client: aioredis.Redis) -> None:
        (worker,) = schedulers(client, keys, s, Clock(tick + 150), [0.0])  # down for two ticks and a half
        await worker.wake()

    run(scenario, redis_url)
    assert [job["scheduled_for"] for job in enqueued(r, keys)] == [iso_utc(tick + 120)]


def test_no_catch_up_where_disabled_but_the_next_tick_runs(r: redis.Redis, keys: Keys, redis_url: str) -> None:
    s = Schedule("reconcile", "reconcile", cron="0 3 * * *", catch_up_s=0)
    tick = datetime(2026, 6, 1, 3, tzinfo=ZoneInfo("UTC")).timestamp()

    async def scenario(client: aioredis.Redis) -> list[int]:
        clock = Clock(tick + 30)
        (worker,) = schedulers(client, keys, s, clock, [0.0])
        won = [await worker.wake()]
        clock.now = tick + 86_400 + 0.8
        won.append(await worker.wake())
        return won

    assert run(scenario, redis_url) == [0, 1]
    assert [job["scheduled_for"] for job in enqueued(r, keys)] == [iso_utc(tick + 86_400)]


def test_a_stalled_worker_does_not_replay_hours_of_ticks(r: redis.Redis, keys: Keys, redis_url: str) -> None:
    s = Schedule("tick", "tick", every_s=1)
    start = 1_800_000_000.0

    async def scenario(client: aioredis.Redis) -> None:
        clock = Clock(start)
        (worker,) = schedulers(client, keys, s, clock, [0.0])
        await worker.wake()
        clock.now = start + 3600  # the process stalled (or its clock jumped) for an hour
        await worker.wake()

    run(scenario, redis_url)
    assert len(enqueued(r, keys)) <= 1 + 60


def app_for(redis_url: str, *, burst: bool = False, **env: str) -> WorkerApp:
    settings = Settings.from_env({"REDIS_URL": redis_url, **env})
    return WorkerApp(
        settings=settings, redis=aioredis.Redis.from_url(redis_url), redis_url=redis_url, database_url="", burst=burst
    )


def test_the_chore_runs_only_where_it_should(redis_url: str) -> None:
    registry = Registry()
    assert scheduler_chore(app_for(redis_url), registry) is None  # no schedules
    job_kind("tick", registry=registry)(lambda job: None)
    schedule("tick", "tick", every_s=1, registry=registry)
    assert scheduler_chore(app_for(redis_url), registry) is not None
    assert scheduler_chore(app_for(redis_url, burst=True), registry) is None
    assert scheduler_chore(app_for(redis_url, SCHEDULER="off"), registry) is None


def test_a_schedule_without_its_kind_is_refused_at_start(redis_url: str) -> None:
    registry = Registry()
    schedule("orphan", "nobody_declares_me", every_s=1, registry=registry)
    with pytest.raises(UnknownKind, match="'nobody_declares_me', which no imported module declares"):
        scheduler_chore(app_for(redis_url), registry)
