"""Job kinds for the incident-desk suite: each run records when it started and how often each job ran.

``alpha`` and ``beta`` record ``<prefix>test:started:<kind>`` (job id -> start time) and
``<prefix>test:runs:<kind>`` (job id -> runs); ``mailer`` declares a default rate limit.
Single-key commands only, so they work on a cluster whatever the job's partition.
"""

from __future__ import annotations

import asyncio
import time

from tests.kinds_app_state import state
from worker import Job, job_kind


async def record(job: Job) -> None:
    started = time.time()
    client = state["redis"]
    prefix = state["prefix"]
    await client.hset(f"{prefix}test:started:{job.kind}", job.job_id, repr(started))  # type: ignore[attr-defined]
    await asyncio.sleep(0.003)
    await client.hincrby(f"{prefix}test:runs:{job.kind}", job.job_id, 1)  # type: ignore[attr-defined]


@job_kind("alpha")
async def alpha(job: Job) -> None:
    await record(job)


@job_kind("beta")
async def beta(job: Job) -> None:
    await record(job)


@job_kind("mailer", rate_limit=1000)
async def mailer(job: Job) -> None:
    await record(job)
