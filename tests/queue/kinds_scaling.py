"""The job kind of the scale-up/scale-down test: it counts each start and each finish of a job."""

from __future__ import annotations

import asyncio
import time

from tests.queue.kinds_basic import key, r
from worker import Job, job_kind


@job_kind("counted")
async def counted(job: Job) -> None:
    """Count the start, run ``s`` seconds (with ``hold``: until the test sets ``release``, at most 60 s), count
    the finish (``started`` and ``finished``: job id -> count)."""
    await r().hincrby(key("started"), job.job_id, 1)
    await asyncio.sleep(float(job.fields["s"]))
    deadline = time.monotonic() + 60
    while job.fields.get("hold") and not await r().exists(key("release")) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    await r().hincrby(key("finished"), job.job_id, 1)


@job_kind("counted_in_thread")
def counted_in_thread(job: Job) -> None:
    """A synchronous handler (it runs in a thread, which a cancel does not stop): sleeps ``s`` seconds."""
    time.sleep(float(job.fields["s"]))
