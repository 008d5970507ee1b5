"""Job kinds for the network fault tests, counting their runs on another server (``COUNT_REDIS_URL``).

| kind | does | designed outcome |
| --- | --- | --- |
| ``block_loop`` | counts its run; blocks the loop ``BLOCK_S`` (10) with ``time.sleep`` | succeeded after 1 run |
"""

from __future__ import annotations

import os
import time

import redis

from worker import Job, job_kind


def runs_key(prefix: str) -> str:
    """Hash on the counting server: job id -> runs of its handler."""
    return f"{prefix}network:runs"


@job_kind("block_loop")
async def block_loop(job: Job) -> None:
    counter = redis.Redis.from_url(os.environ["COUNT_REDIS_URL"])
    counter.hincrby(runs_key(os.environ.get("QUEUE_PREFIX", "")), job.job_id, 1)
    counter.close()
    time.sleep(float(os.environ.get("BLOCK_S", "10")))  # on purpose: a handler that blocks the loop
