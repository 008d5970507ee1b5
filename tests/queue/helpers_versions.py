"""What the versioned test kinds record of each run: which deploy ran the job (``old`` / ``new``), the payload
version it saw, the address it read and how many times workers handed the job back (``<prefix>test:ran``)."""

from __future__ import annotations

import json

import redis.asyncio as aioredis

from tests.kinds_app_state import state
from worker import Job


async def record_run(job: Job, deploy: str, address: str) -> None:
    client: aioredis.Redis = state["redis"]  # type: ignore[assignment]
    fields = job.fields
    record = {
        "worker": deploy,
        "v": fields.get("v", ""),
        "address": address,
        "handed_back": fields.get("handed_back", "0"),
    }
    await client.hset(f"{state['prefix']}test:ran", job.job_id, json.dumps(record))
