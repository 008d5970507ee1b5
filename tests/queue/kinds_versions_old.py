"""The old deploy's ``send_email``: payload version 1 (the field ``email``). It records who ran each job and
with what payload (:mod:`tests.queue.helpers_versions`), and fails any job without ``email`` (a payload it cannot
read)."""

from __future__ import annotations

from tests.queue.helpers_versions import record_run
from worker import Job, job_kind


@job_kind("send_email")
async def send_email(job: Job) -> None:
    address = job.fields["email"]  # a version-2 payload has none: KeyError, the failure the tests forbid
    await record_run(job, "old", address)
