"""Job kinds for the stopping tests: plain handlers that overrun their timeout (ignoring ``job.stopping`` or
heeding it), and long ones for shutdown. Each records in Redis, under the test's QUEUE_PREFIX, when each
attempt started and ended (``<prefix>test:spans:<job_id>``, "start end" in epoch seconds)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator

import redis

from worker import Job, RetryPolicy, connect, job_kind, lifespan
from worker.app import WorkerApp

state: dict[str, object] = {}


@lifespan()
async def clients(app: WorkerApp) -> AsyncIterator[None]:
    state["prefix"] = app.settings.prefix
    state["sync"] = connect(app.settings, url=app.redis_url)  # a cluster client on a cluster
    yield


def key(name: str) -> str:
    return f"{state['prefix']}test:{name}"


def sync() -> redis.Redis:
    return state["sync"]  # type: ignore[return-value]


def _span(job: Job, started: float) -> None:
    sync().rpush(key(f"spans:{job.job_id}"), f"{started!r} {time.time()!r}")


@job_kind("stubborn", timeout_s=0.3, retry=RetryPolicy(retries=2, base_s=0.01, cap_s=0.02))
def stubborn(job: Job) -> None:
    """Ignores ``job.stopping``: sleeps ``sleep_s`` whatever its timeout, then completes its side effect."""
    started = time.time()
    sync().sadd(key("started"), job.job_id)
    time.sleep(float(job.fields.get("sleep_s", "0.8")))
    sync().incr(key(f"effects:{job.job_id}"))
    _span(job, started)


@job_kind("polite", timeout_s=0.3)
def polite(job: Job) -> None:
    """Waits on ``job.stopping`` instead of sleeping, and stops when it is set."""
    started = time.time()
    stopped = job.stopping.wait(float(job.fields.get("sleep_s", "10")))
    sync().set(key(f"stopped:{job.job_id}"), "yes" if stopped else "no")
    _span(job, started)


@job_kind("quick")
def quick(job: Job) -> None:
    started = time.time()
    sync().sadd(key("done"), job.job_id)
    _span(job, started)


@job_kind("quick_timed", timeout_s=1.0)
def quick_timed(job: Job) -> None:
    """``quick`` with a timeout shorter than the hung handler it waits behind: charged only from its own start."""
    quick(job)


@job_kind("sync_long")
def sync_long(job: Job) -> None:
    """Runs ``sleep_s``, looking at ``job.stopping`` every 50 ms unless ``ignore=yes``."""
    started = time.time()
    sync().sadd(key("started"), job.job_id)
    if job.fields.get("ignore") == "yes":
        time.sleep(float(job.fields["sleep_s"]))
    elif job.stopping.wait(float(job.fields["sleep_s"])):
        _span(job, started)
        sync().sadd(key("stopped"), job.job_id)
        return
    sync().sadd(key("done"), job.job_id)
    _span(job, started)


@job_kind("async_long")
async def async_long(job: Job) -> None:
    started = time.time()
    sync().sadd(key("started"), job.job_id)
    try:
        await asyncio.sleep(float(job.fields["sleep_s"]))
    except asyncio.CancelledError:
        _span(job, started)
        sync().sadd(key("stopped"), job.job_id)
        raise
    sync().sadd(key("done"), job.job_id)
    _span(job, started)


@job_kind("isolated_sleep", timeout_s=0.3, isolation="process")
def isolated_sleep(job: Job) -> None:
    """In a child process: notes its pid, then sleeps 60 s whatever it is told (only a kill stops it)."""
    sync().set(key(f"pid:{job.job_id}"), os.getpid())
    time.sleep(60)


@job_kind("isolated", isolation="process", retry=RetryPolicy(retries=1, base_s=0.01, cap_s=0.02))
def isolated(job: Job) -> str:
    """In a child process: succeeds, raises, or dies by the signal ``die`` names."""
    sync().rpush(key(f"pids:{job.job_id}"), os.getpid())
    if job.fields.get("fail") == "yes":
        raise ValueError(f"order {job.fields.get('order_id', '?')} failed in its child")
    if job.fields.get("die"):
        os.kill(os.getpid(), getattr(signal, job.fields["die"]))
    sync().sadd(key("done"), job.job_id)
    return "ok"
