"""A schedule every second and its kind, for the three-process scheduler test.

The handler appends ``scheduled_for job_id pid`` to the file named by
``TICK_LOG`` (one short O_APPEND write per job, so processes do not interleave).
"""

from __future__ import annotations

import os

from worker import Job, job_kind, schedule


@job_kind("tick")
def tick(job: Job) -> None:
    line = f"{job.fields['scheduled_for']} {job.job_id} {os.getpid()}\n".encode()
    fd = os.open(os.environ["TICK_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


schedule("tick", "tick", every_s=1)
