"""Job kinds for the cluster suite: each records its run under the test's prefix.

The records are single-key commands (SADD, INCR), which a cluster client routes to
whichever node owns the key, so they work whatever the partition of the job.
"""

from __future__ import annotations

import asyncio
import os

from tests.kinds_app_state import key, state
from worker import Job, RetryPolicy, job_kind


def r() -> object:
    return state["redis"]


@job_kind("noop")
async def noop(job: Job) -> None:
    await r().sadd(key("done"), job.job_id)  # type: ignore[attr-defined]


@job_kind("flaky", retry=RetryPolicy(retries=3, base_s=0.01, cap_s=0.02))
async def flaky(job: Job) -> None:
    """Fails on its first two attempts, then succeeds."""
    runs = await r().incr(key(f"attempts:{job.job_id}"))  # type: ignore[attr-defined]
    if runs <= 2:
        raise ConnectionError(f"attempt {runs} of {job.job_id} fails on purpose")
    await r().sadd(key("done"), job.job_id)  # type: ignore[attr-defined]


@job_kind("doomed", retry=RetryPolicy(retries=1, base_s=0.01, cap_s=0.02))
async def doomed(job: Job) -> None:
    await r().incr(key(f"attempts:{job.job_id}"))  # type: ignore[attr-defined]
    raise ValueError(f"order {job.fields.get('order_id', '?')} is doomed")


@job_kind("crash")
async def crash(job: Job) -> None:
    """Kills its worker process: the entry stays pending until it is poison."""
    await r().incr(key(f"crashes:{job.job_id}"))  # type: ignore[attr-defined]
    os._exit(1)


@job_kind("slow")
async def slow(job: Job) -> None:
    """Takes a few milliseconds, so that a backlog of them lasts long enough to watch another partition."""
    await asyncio.sleep(0.005)
    await r().sadd(key("done"), job.job_id)  # type: ignore[attr-defined]
