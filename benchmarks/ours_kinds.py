"""The benchmark's job kinds for this worker (``WORKER_KINDS=ours_kinds``, ``PYTHONPATH=benchmarks``).

The same three jobs every peer runs: ``noop``; ``sleep10``, an I/O-bound job
that waits 10 ms; ``stamped``, a no-op that records how long after its ``t``
field (enqueue time or due time, epoch seconds) it started. And ``noop_sync``,
a plain function: the no-op as a synchronous handler, which runs in a thread.
"""

from __future__ import annotations

import asyncio

from probe import PROBE

from worker import Job, job_kind


@job_kind("noop")
async def noop(job: Job) -> None:
    PROBE.done()


@job_kind("sleep10")
async def sleep10(job: Job) -> None:
    await asyncio.sleep(0.01)
    PROBE.done()


@job_kind("stamped")
async def stamped(job: Job) -> None:
    PROBE.started(float(job.fields["t"]))
    PROBE.done()


@job_kind("noop_sync")
def noop_sync(job: Job) -> None:
    PROBE.done()
