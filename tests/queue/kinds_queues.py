"""Job kinds for the named-queue tests: each start is recorded, in order, in ``<prefix>test:starts`` (the
job's field ``q``, which the test sets to the queue it enqueued to), so a test can count each queue's share
of the starts a real worker made."""

from __future__ import annotations

import asyncio
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


@job_kind("q_start")
async def q_start(job: Job) -> None:
    await state["redis"].rpush(key("starts"), job.fields.get("q", "?"))  # type: ignore[attr-defined]


@job_kind("q_bulk_fails", queue="bulk", retry=RetryPolicy(retries=1, base_s=0.01, cap_s=0.05))
async def q_bulk_fails(job: Job) -> None:
    await state["redis"].rpush(key("starts"), f"bulk:{job.attempts}")  # type: ignore[attr-defined]
    raise ValueError("fails on purpose")


@job_kind("q_hangs_once", queue="bulk")
async def q_hangs_once(job: Job) -> None:
    """Its first run hangs until the worker is killed; a second run (the reclaim's) records itself."""
    redis = state["redis"]
    if await redis.incr(key(f"runs:{job.job_id}")) == 1:  # type: ignore[attr-defined]
        await asyncio.Event().wait()
    await redis.rpush(key("starts"), "bulk:reclaimed")  # type: ignore[attr-defined]
