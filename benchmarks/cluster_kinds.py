"""The cluster benchmark's job kinds (``WORKER_KINDS=cluster_kinds``, ``PYTHONPATH=benchmarks``).

``noop`` counts its runs and the times of the first and the last; the
process writes them to ``PROBE_FILE`` when it exits (``--burst``: once the
queue is drained), so that several worker processes sharing a queue can be
added up. ``doomed`` fails at once (no retries): each run is one dead-letter
move, the outcome script that ``WAIT_REPLICAS`` makes wait.
"""

from __future__ import annotations

import atexit
import json
import os
import time

from worker import Job, job_kind

seen = {"count": 0, "first": 0.0, "last": 0.0}


@job_kind("noop")
async def noop(job: Job) -> None:
    now = time.time()
    seen["count"] += 1
    if seen["count"] == 1:
        seen["first"] = now
    seen["last"] = now


@job_kind("doomed")
async def doomed(job: Job) -> None:
    await noop(job)
    raise ValueError("doomed on purpose")


@atexit.register
def report() -> None:
    path = os.environ.get("PROBE_FILE")
    if path:
        with open(path, "w") as f:
            json.dump(seen, f)
