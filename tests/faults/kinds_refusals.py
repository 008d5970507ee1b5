"""Job kinds for the refused-writes tests: each counts its runs on another server (``COUNT_REDIS_URL``), so
that only the worker's own moves meet the server that refuses writes.

| kind | does | designed outcome |
| --- | --- | --- |
| ``succeed`` | counts its run | succeeded after 1 run |
| ``fail_once`` | counts its run; raises on the first | retried once, succeeded after 2 runs |
| ``always_fail`` | counts its run; raises | dead-lettered as exhausted after 2 runs |

Each run takes ``JOB_MS`` (default 20) so that the worker is busy when the server starts refusing.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import redis.asyncio as aioredis

from worker import Job, RetryPolicy, job_kind

ONE_RETRY = RetryPolicy(retries=1, base_s=0.05, cap_s=0.1)
state: dict[str, Any] = {}


def runs_key(prefix: str) -> str:
    """Hash on the counting server: job id -> runs of its handler."""
    return f"{prefix}refusals:runs"


async def count_run(job: Job) -> int:
    """This run's number for the job (1 for its first run)."""
    if "redis" not in state:
        state["redis"] = aioredis.Redis.from_url(os.environ["COUNT_REDIS_URL"])
    await asyncio.sleep(float(os.environ.get("JOB_MS", "20")) / 1000)
    runs: int = await state["redis"].hincrby(runs_key(os.environ.get("QUEUE_PREFIX", "")), job.job_id, 1)
    return runs


@job_kind("succeed")
async def succeed(job: Job) -> None:
    await count_run(job)


@job_kind("fail_once", retry=ONE_RETRY)
async def fail_once(job: Job) -> None:
    if await count_run(job) == 1:
        raise RuntimeError("fails on its first run, on purpose")


@job_kind("always_fail", retry=ONE_RETRY)
async def always_fail(job: Job) -> None:
    await count_run(job)
    raise RuntimeError("fails every time, on purpose")
