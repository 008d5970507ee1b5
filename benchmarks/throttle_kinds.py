"""The throttle benchmark's kind (``WORKER_KINDS=throttle_kinds``, ``PYTHONPATH=benchmarks``).

``paced`` records when its handler started (``<prefix>bench:started``: job id -> epoch seconds), in the
worker's own Redis client, kept by a lifespan.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from worker import Job, job_kind, lifespan
from worker.app import WorkerApp

state: dict[str, Any] = {}


def started_key(prefix: str) -> str:
    return f"{prefix}bench:started"


@lifespan()
async def remember(app: WorkerApp) -> AsyncIterator[None]:
    state["redis"] = app.redis
    state["key"] = started_key(app.settings.prefix)
    yield


@job_kind("paced")
async def paced(job: Job) -> None:
    await state["redis"].hset(state["key"], job.job_id, repr(time.time()))
