"""The new deploy: ``send_email`` at payload version 2 (``to`` replaces ``email``, upcast from version 1),
and a kind the old deploy lacks, ``send_sms``. Each records who ran each job and with what payload."""

from __future__ import annotations

import json

import redis.asyncio as aioredis

from tests.kinds_app_state import state
from worker import Job, job_kind


def email_to_to(fields: dict[str, str]) -> dict[str, str]:
    """Version 1 -> 2: the address moves from ``email`` to ``to``."""
    out = {name: value for name, value in fields.items() if name != "email"}
    out["to"] = fields["email"]
    return out


async def _record(job: Job, address: str) -> None:
    client: aioredis.Redis = state["redis"]  # type: ignore[assignment]
    record = {
        "worker": "new",
        "v": job.fields.get("v", ""),
        "address": address,
        "handed_back": job.fields.get("handed_back", "0"),
    }
    await client.hset(f"{state['prefix']}test:ran", job.job_id, json.dumps(record))


@job_kind("send_email", version=2, upcast={1: email_to_to})
async def send_email(job: Job) -> None:
    await _record(job, job.fields["to"])


@job_kind("send_sms")
async def send_sms(job: Job) -> None:
    await _record(job, job.fields["phone"])
