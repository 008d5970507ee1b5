"""The new deploy: ``send_email`` at payload version 2 (``to`` replaces ``email``, upcast from version 1),
and a kind the old deploy lacks, ``send_sms``. Each records who ran each job and with what payload."""

from __future__ import annotations

from tests.queue.helpers_versions import record_run
from worker import Job, job_kind


def email_to_to(fields: dict[str, str]) -> dict[str, str]:
    """Version 1 -> 2: the address moves from ``email`` to ``to``."""
    out = {name: value for name, value in fields.items() if name != "email"}
    out["to"] = fields["email"]
    return out


@job_kind("send_email", version=2, upcast={1: email_to_to})
async def send_email(job: Job) -> None:
    await record_run(job, "new", job.fields["to"])


@job_kind("send_sms")
async def send_sms(job: Job) -> None:
    await record_run(job, "new", job.fields["phone"])
