"""Job kinds for the opslib tests, run by real worker processes.

``seat_label`` is the demo night in small: it renders a ticket unless its
seat label is malformed (``14-C`` instead of ``14C``), and retries once, so a
bad label ends as a dead letter with attempts 2. The "data fix" is adding the
label to the Redis set ``<prefix>test:fixed_labels``; replayed after it, the
job succeeds. ``mailer`` retries three times with a backoff of days, so
after one failure it waits in ``delayed`` (a replay that is *retrying*).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

from worker import Job, RetryPolicy, job_kind, lifespan
from worker.app import WorkerApp

state: dict[str, Any] = {}
GOOD_LABEL = re.compile(r"^\d+[A-Z]$")


class SeatLabelInvalid(ValueError):
    """A seat label that is not a row number and a seat letter."""


@lifespan()
async def connect(app: WorkerApp) -> AsyncIterator[None]:
    state["redis"] = app.redis
    state["prefix"] = app.settings.prefix
    yield


def key(name: str) -> str:
    return f"{state['prefix']}test:{name}"


@job_kind("seat_label", retry=RetryPolicy(retries=1, base_s=0.01, cap_s=0.02))
async def seat_label(job: Job) -> None:
    label = job.fields["seat"]
    if not GOOD_LABEL.match(label) and not await state["redis"].sismember(key("fixed_labels"), label):
        raise SeatLabelInvalid(f"{label!r} is not a row letter and a seat number")
    await state["redis"].sadd(key("rendered"), job.job_id)


@job_kind("mailer", retry=RetryPolicy(retries=3, base_s=1e6, cap_s=1e6))
async def mailer(job: Job) -> None:
    raise ConnectionError("mail provider answered 503")


@job_kind("tally")
async def tally(job: Job) -> None:
    """Counts each run of a job id in the hash ``<prefix>test:runs`` (a job that ran twice shows 2)."""
    await state["redis"].hincrby(key("runs"), job.job_id, 1)
