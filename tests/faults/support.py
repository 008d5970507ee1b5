"""Shared parts of the fault suite: the kinds module, settings that make reclaim quick, bulk enqueue."""

from __future__ import annotations

import redis

from worker.enqueue import job_fields
from worker.keys import Keys

KINDS = "tests.faults.fault_kinds"

#: Reclaim after 1 s idle, looked for every 0.2 s: a killed worker's entries come back quickly.
FAST_RECLAIM = {"RECLAIM_IDLE_MS": "1000", "RECLAIM_INTERVAL_S": "0.2"}


def enqueue_many(client: redis.Redis, keys: Keys, kind: str, count: int, **fields: str) -> list[str]:
    """Add ``count`` jobs with job ids ``j0``, ``j1``, ... in pipelined chunks; return the job ids."""
    ids = [f"j{i}" for i in range(count)]
    for low in range(0, count, 1000):
        pipe = client.pipeline(transaction=False)
        for job_id in ids[low : low + 1000]:
            pipe.xadd(keys.jobs, job_fields(kind, {"job_id": job_id, **fields}))
        pipe.execute()
    return ids
