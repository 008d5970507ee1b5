"""The new deploy's ``ask_feedback``: payload version 2, the address in ``to``; version 1 is upcast."""

from __future__ import annotations

from stagedoor.demo.feedback import KIND, record_run
from worker import Job, job_kind


def email_to_to(fields: dict[str, str]) -> dict[str, str]:
    """Version 1 -> 2: the address moves from ``email`` to ``to``."""
    upcast = {name: value for name, value in fields.items() if name != "email"}
    upcast["to"] = fields["email"]
    return upcast


@job_kind(KIND, version=2, upcast={1: email_to_to})
async def ask_feedback(job: Job) -> None:
    await record_run(job, "new", job.fields["to"])
