"""Job kinds for the supervisor's tests: each records the worker process that ran it."""

from __future__ import annotations

import asyncio
import os
import time

from tests.queue.kinds_basic import key, r
from worker import Job, job_kind


@job_kind("meet")
async def meet(job: Job) -> None:
    """Record this process, then wait (at most 20 s) until ``n`` processes have run a ``meet``:
    with one slot each, no process can take every job before the others start."""
    await r().sadd(key("pids"), os.getpid())
    deadline = time.monotonic() + 20
    while await r().scard(key("pids")) < int(job.fields["n"]) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    await r().sadd(key("done"), job.job_id)


@job_kind("slow")
async def slow(job: Job) -> None:
    """Say it started, run ``s`` seconds, say it finished."""
    await r().sadd(key("running"), job.job_id)
    await asyncio.sleep(float(job.fields["s"]))
    await r().sadd(key("done"), job.job_id)
