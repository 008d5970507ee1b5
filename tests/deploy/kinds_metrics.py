"""Job kinds for the metrics and log tests: no database, no shared state.

``ok`` succeeds, ``flaky`` fails its first attempt and succeeds on the retry,
``boom`` fails with no retries (dead-lettered as exhausted), ``slow`` sleeps
``seconds`` (for the drain on SIGTERM). ``nightly_ok`` is a schedule of ``ok``
at midnight UTC with no catch-up, so it never runs during a test but gives the
metrics a scheduled kind and its interval.
"""

from __future__ import annotations

import asyncio

from worker import Job, RetryPolicy, job_kind
from worker.schedules import schedule


@job_kind("ok")
async def ok(job: Job) -> None:
    return None


@job_kind("flaky", retry=RetryPolicy(retries=2, base_s=0.01, cap_s=0.02))
async def flaky(job: Job) -> None:
    if job.attempts == 0:
        raise ConnectionError("the provider answered 503 on the first attempt")


@job_kind("boom")
async def boom(job: Job) -> None:
    raise ValueError(f"order {job.fields.get('order_id', '?')} cannot be rendered")


@job_kind("slow")
async def slow(job: Job) -> None:
    await asyncio.sleep(float(job.fields.get("seconds", "1")))


schedule("nightly_ok", "ok", every_s=86_400, catch_up_s=0)
