"""A job kind for the failover test: it writes each run to a file, not to Redis.

The test kills a Redis primary, and writes made there just before the kill may
be lost with it (asynchronous replication); a run recorded in Redis could
vanish with them and look like a lost job. A line appended to a local file
(``FAILOVER_RUNS_FILE``; one ``write`` of a short line with O_APPEND, atomic
between the worker processes) survives whatever Redis does.
"""

from __future__ import annotations

import os

from worker import Job, job_kind


@job_kind("record_run")
async def record_run(job: Job) -> None:
    fd = os.open(os.environ["FAILOVER_RUNS_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{job.job_id}\n".encode())
    finally:
        os.close(fd)
