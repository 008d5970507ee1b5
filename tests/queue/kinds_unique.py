"""Job kinds for the unique-job tests: each run is counted under the test's prefix, so that a test can
count executions per unique key; ``unique_slow`` runs until its key ``gate`` is set (or 20 s pass).

Each handler call records a token of its own (a uuid made once per call, with the entry id and attempt):
the worker's client sends a command again after a reply timed out (docs/worker.md, "Unique jobs and
idempotent enqueue"), so one run's RPUSH may land twice. The same token twice is one run written twice;
two tokens are two runs (:func:`tests.queue.test_unique.runs` counts tokens)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator

from worker import Job, RetryPolicy, job_kind, lifespan
from worker.app import WorkerApp

state: dict[str, object] = {}


@lifespan()
async def connect(app: WorkerApp) -> AsyncIterator[None]:
    state["redis"] = app.redis
    state["prefix"] = app.settings.prefix
    yield


def key(name: str) -> str:
    return f"{state['prefix']}test:{name}"


async def _count(job: Job) -> None:
    redis = state["redis"]
    record = {
        "key": job.fields.get("unique_key", ""),
        "job_id": job.job_id,
        "entry_id": job.entry_id,
        "attempt": job.attempts,
        "token": uuid.uuid4().hex,
    }
    await redis.rpush(key("runs"), json.dumps(record))  # type: ignore[attr-defined]


@job_kind("unique_ok")
async def unique_ok(job: Job) -> None:
    await _count(job)


@job_kind("unique_fail", retry=RetryPolicy(retries=1, base_s=0.01, cap_s=0.02))
async def unique_fail(job: Job) -> None:
    await _count(job)
    raise ValueError("fails on purpose")


@job_kind("unique_slow")
async def unique_slow(job: Job) -> None:
    await _count(job)
    redis = state["redis"]
    deadline = time.monotonic() + 20
    while not await redis.exists(key("gate")) and time.monotonic() < deadline:  # type: ignore[attr-defined]
        await asyncio.sleep(0.02)


@job_kind("unique_once")
async def unique_once(job: Job) -> None:
    """Counts an overlap when another job of its key runs at the same time (which the key forbids)."""
    redis = state["redis"]
    if await redis.incr(key("active")) > 1:  # type: ignore[attr-defined]
        await redis.incr(key("overlaps"))  # type: ignore[attr-defined]
    await _count(job)
    await asyncio.sleep(0.005)  # the job's work: a window in which a duplicate would overlap
    await redis.decr(key("active"))  # type: ignore[attr-defined]
