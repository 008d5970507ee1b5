"""The old deploy's ``ask_feedback``: payload version 1, the address in ``email`` (the old worker's kinds)."""

from __future__ import annotations

from stagedoor.demo.feedback import KIND, record_run
from worker import Job, job_kind


@job_kind(KIND)
async def ask_feedback(job: Job) -> None:
    # A version-2 payload has no ``email``: this KeyError is the failure hand-backs prevent.
    await record_run(job, "old", job.fields["email"])
