"""The old deploy's ``send_email``: payload version 1 (the field ``email``). It records who ran each job and
with what payload under the test's prefix, and fails any job without ``email`` (a payload it cannot read)."""

from __future__ import annotations

import json

import redis.asyncio as aioredis

from tests.kinds_app_state import state
from worker import Job, job_kind


@job_kind("send_email")
async def send_email(job: Job) -> None:
    address = job.fields["email"]  # a version-2 payload has none: KeyError, the failure this test forbids
    client: aioredis.Redis = state["redis"]  # type: ignore[assignment]
    record = {
        "worker": "old",
        "v": job.fields.get("v", ""),
        "address": address,
        "handed_back": job.fields.get("handed_back", "0"),
    }
    await client.hset(f"{state['prefix']}test:ran", job.job_id, json.dumps(record))
