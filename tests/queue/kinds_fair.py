"""Job kinds for the fair-key tests: each start is recorded, in order, under the test's QUEUE_PREFIX
(``<prefix>test:starts``: the job's ``tenant`` field), so a test can see the order the worker chose."""

from __future__ import annotations

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


async def _record(job: Job) -> None:
    redis = state["redis"]
    await redis.rpush(key("starts"), job.fields.get("tenant", ""))  # type: ignore[attr-defined]
    await redis.sadd(key("done"), job.job_id)  # type: ignore[attr-defined]


job_kind("fair_start")(_record)


@job_kind("fair_flaky", retry=RetryPolicy(retries=1, base_s=0.01, cap_s=0.05))
async def fair_flaky(job: Job) -> None:
    """Fails its first attempt, then records its start."""
    if job.attempts == 0:
        raise ValueError("first attempt fails on purpose")
    await _record(job)


@job_kind("fair_doomed")
async def fair_doomed(job: Job) -> None:
    """Fails until the field ``fixed`` is set in Redis (then records its start): a dead letter to replay."""
    if not await state["redis"].exists(key("fixed")):  # type: ignore[attr-defined]
        raise ValueError("doomed until fixed")
    await _record(job)
