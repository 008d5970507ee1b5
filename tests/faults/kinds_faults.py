"""Job kinds for the fault suite. Each records what it did in Redis under the
test's QUEUE_PREFIX (``<prefix>fault:...``), so a test can count real runs made
by real worker processes that it kills, starves or feeds garbage."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

from worker import Job, RetryPolicy, job_kind, lifespan
from worker.app import WorkerApp

state: dict[str, Any] = {}

#: A retry policy that rides out a Redis restart: the handler's own write fails while Redis is away.
RIDE_OUT = RetryPolicy(retries=5, base_s=0.05, cap_s=0.5)


def runs_key(prefix: str) -> str:
    """Hash: job id (or ``probe`` field) -> how many times a handler completed it."""
    return f"{prefix}fault:runs"


def crashes_key(prefix: str) -> str:
    """Counter: how many times the crasher ran (each run kills its process)."""
    return f"{prefix}fault:crashes"


def ticks_key(prefix: str) -> str:
    """Hash: ``scheduled_for`` of each tick of the test schedule -> how many jobs it produced."""
    return f"{prefix}fault:ticks"


@lifespan()
async def connect(app: WorkerApp) -> AsyncIterator[None]:
    state["redis"] = app.redis
    state["prefix"] = app.settings.prefix
    yield


@job_kind("record", retry=RIDE_OUT)
async def record(job: Job) -> None:
    """Counts one completed run of this job (by its ``probe`` field, else its job id)."""
    await state["redis"].hincrby(runs_key(state["prefix"]), job.fields.get("probe") or job.job_id, 1)


@job_kind("fail")
async def fail(job: Job) -> None:
    """Always fails; no retries, so it is dead-lettered as exhausted."""
    raise ValueError("fails on purpose")


@job_kind("crash_if_marked")
async def crash_if_marked(job: Job) -> None:
    """Kills its own process (no exception, no outcome) when ``crash`` is ``yes``; else records a run."""
    if job.fields.get("crash") == "yes":
        await state["redis"].incr(crashes_key(state["prefix"]))
        os._exit(70)
    await state["redis"].hincrby(runs_key(state["prefix"]), job.job_id, 1)


@job_kind("tick")
async def tick(job: Job) -> None:
    """Counts the jobs the test schedule produced, per tick."""
    await state["redis"].hincrby(ticks_key(state["prefix"]), job.fields["scheduled_for"], 1)
