"""``ask_feedback``, the demo's kind whose payload changes during the night, and what its handlers record.

A demo-only kind (never in :mod:`stagedoor.kinds`, so the night's queue, its
kinds table and what the notebooks read stay as they are): after the show,
ask a buyer how it went. Version 1 (the old deploy, :mod:`stagedoor.demo.feedback_v1`)
carries the buyer's address as ``email``; version 2 (the new deploy,
:mod:`stagedoor.demo.feedback_v2`) as ``to``, with an upcaster from version 1.
Each run is recorded in the hash :func:`runs_key` (job id -> JSON: which deploy
ran it, the ``v`` its handler saw, the address it read, how many times workers
handed it back), which :mod:`stagedoor.demo.rollout` sums up.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from worker import Job, WorkerApp, lifespan

KIND = "ask_feedback"

_worker: dict[str, WorkerApp] = {}


def runs_key(prefix: str) -> str:
    """The hash of the runs under the rollout's queue prefix."""
    return f"{prefix}demo:feedback_runs"


@lifespan()
async def remember_worker(app: WorkerApp) -> AsyncIterator[None]:
    """Keep the worker's client and prefix for the handlers (one lifespan, whichever deploy imports it)."""
    _worker["app"] = app
    yield


async def record_run(job: Job, deploy: str, address: str) -> None:
    """Record that ``deploy`` ran ``job`` with ``address``, under the worker's prefix."""
    app = _worker["app"]
    fields = job.fields
    run = {
        "deploy": deploy,
        "v": fields.get("v", "1"),
        "address": address,
        "handed_back": fields.get("handed_back", "0"),
    }
    await app.redis.hset(runs_key(app.settings.prefix), job.job_id, json.dumps(run))
