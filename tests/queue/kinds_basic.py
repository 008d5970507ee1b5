"""Job kinds for the queue tests. Each records what happened in Redis under the
test's QUEUE_PREFIX (``<prefix>test:...``), so a test can assert on real effects
made by a real worker process."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator

import redis

from worker import Job, RetryPolicy, job_kind, lifespan
from worker.app import WorkerApp

state: dict[str, object] = {}


@lifespan()
async def connect(app: WorkerApp) -> AsyncIterator[None]:
    state["redis"] = app.redis
    state["prefix"] = app.settings.prefix
    state["sync"] = redis.Redis.from_url(app.redis_url)
    yield


def key(name: str) -> str:
    return f"{state['prefix']}test:{name}"


def r() -> redis.asyncio.Redis:
    return state["redis"]  # type: ignore[return-value]


@job_kind("noop")
async def noop(job: Job) -> None:
    await r().sadd(key("done"), job.job_id)


@job_kind("sync_noop")
def sync_noop(job: Job) -> None:
    state["sync"].sadd(key("done"), job.job_id)  # type: ignore[attr-defined]


async def _fail(job: Job) -> None:
    await r().incr(key(f"attempts:{job.job_id}"))
    raise ValueError(f"order {job.fields.get('order_id', '?')} failed on purpose")


job_kind("fail_none")(_fail)
job_kind("fail_once_retried", retry=RetryPolicy(retries=1, base_s=0.01, cap_s=0.05))(_fail)
job_kind("fail_five_retries", retry=RetryPolicy(retries=5, base_s=0.01, cap_s=0.05))(_fail)


async def _fail_numbered(job: Job) -> None:
    """Fails with the attempt's number (counted per job id, across replays) and the job's ``note``."""
    attempt = await r().incr(key(f"attempts:{job.job_id}"))
    raise ValueError(f"attempt {attempt} failed {job.fields.get('note', '')}".rstrip())


job_kind("fail_twice_then_dead", retry=RetryPolicy(retries=2, base_s=0.01, cap_s=0.02))(_fail_numbered)
job_kind("fail_fifteen_retries", retry=RetryPolicy(retries=15, base_s=0.005, cap_s=0.01))(_fail_numbered)


class Refused(LookupError):
    """Stands for a permanent error (a 4xx): a subclass of the listed LookupError."""


@job_kind("refused_or_failing", retry=RetryPolicy(retries=5, base_s=0.01, cap_s=0.05, give_up_on=(LookupError,)))
async def refused_or_failing(job: Job) -> None:
    """Raises Refused (given up on at once) when ``refuse=yes``, else ValueError (retried)."""
    await r().incr(key(f"attempts:{job.job_id}"))
    if job.fields.get("refuse") == "yes":
        raise Refused(f"order {job.fields.get('order_id', '?')} refused for good")
    raise ValueError(f"order {job.fields.get('order_id', '?')} failed on purpose")


@job_kind("flaky_then_ok", retry=RetryPolicy(retries=3, base_s=0.01, cap_s=0.02))
async def flaky_then_ok(job: Job) -> None:
    """Fails on its first two attempts, then succeeds (a condition that passes)."""
    runs = await r().incr(key(f"attempts:{job.job_id}"))
    if runs <= 2:
        raise ConnectionError("mail provider answered 503")
    await r().sadd(key("done"), job.job_id)


@job_kind("sleepy")
async def sleepy(job: Job) -> None:
    """Sleeps ``sleep_s``, counting its runs and the most slots in use at once."""
    await r().incr(key(f"runs:{job.job_id}"))
    active = await r().incr(key("active"))
    await r().eval(
        "if tonumber(redis.call('GET', KEYS[1]) or '0') < tonumber(ARGV[1]) then "
        "redis.call('SET', KEYS[1], ARGV[1]) end",
        1,
        key("max_active"),
        active,
    )
    await r().sadd(key("started"), job.job_id)
    try:
        await asyncio.sleep(float(job.fields.get("sleep_s", "0.05")))
    finally:
        await r().decr(key("active"))
    await r().sadd(key("done"), job.job_id)


@job_kind("slow_with_timeout", timeout_s=0.2)
async def slow_with_timeout(job: Job) -> None:
    await asyncio.sleep(30)


@job_kind("hang")
async def hang(job: Job) -> None:
    """Counts its run, then hangs until the test kills the process."""
    await r().incr(key(f"runs:{job.job_id}"))
    await asyncio.sleep(3600)


@job_kind("crash")
async def crash(job: Job) -> None:
    """Kills its own process when the job says so (a poison message); else records success."""
    await r().incr(key(f"runs:{job.job_id}"))
    if job.fields.get("crash") == "yes":
        os._exit(1)
    await r().sadd(key("done"), job.job_id)


@job_kind("stamp")
async def stamp(job: Job) -> None:
    """Records when it ran (epoch seconds), for delayed-job tests."""
    await r().set(key(f"ran_at:{job.job_id}"), repr(time.time()))
