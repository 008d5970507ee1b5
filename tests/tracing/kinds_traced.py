"""Job kinds for the tracing tests, in a worker whose spans go to ``TRACE_SPANS_FILE`` (an SDK with the
in-memory exporter, :mod:`tests.tracing.helpers_spans`). Importing this module configures that SDK: the worker
then finds a tracer provider and traces each attempt."""

from __future__ import annotations

import logging
import os

from tests.tracing import helpers_spans as spans
from worker import Job, RetryPolicy, job_kind

spans.install(os.environ["TRACE_SPANS_FILE"])
log = logging.getLogger("tests.tracing")


@job_kind("fixed_by_replay", retry=RetryPolicy(retries=1, base_s=0.01, cap_s=0.05))
async def fixed_by_replay(job: Job) -> None:
    """Fails on every attempt until a replay puts it back (the fix is in), then succeeds."""
    log.info("Running %s attempt %d.", job.job_id, job.attempts + 1)
    if "replay_of" not in job.fields:
        raise ValueError(f"order {job.fields.get('order_id', '?')} failed on purpose")


@job_kind("traced_ok")
async def traced_ok(job: Job) -> None:
    """Succeeds."""


@job_kind("traced_sync")
def traced_sync(job: Job) -> None:
    """A synchronous handler (run in a thread) that logs."""
    log.info("Sync handler ran %s.", job.job_id)
