"""The queue's latency: ``queue_stats().counts`` oldest_waiting_s and the metrics' reading of it agree."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis
import redis.asyncio as aioredis

import opslib
from worker.observability.queue_state import read_queue_state_async
from worker.store.keys import GROUP, Keys


def metrics_reading(redis_url: str, keys: Keys) -> float:
    async def read() -> float:
        client = aioredis.Redis.from_url(redis_url)
        try:
            state = await read_queue_state_async(client, keys, reclaim_idle_ms=60_000, now=time.time())
        finally:
            await client.aclose()
        return state.oldest_waiting_s

    return asyncio.run(read())


def test_oldest_waiting_is_0_without_a_backlog_and_the_oldest_entry_s_age_with_one(
    r: redis.Redis, keys: Keys, redis_url: str, at: dict[str, Any]
) -> None:
    assert opslib.queue_stats(**at).oldest_waiting_s == 0  # no stream at all
    r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
    assert opslib.queue_stats(**at).oldest_waiting_s == 0 and metrics_reading(redis_url, keys) == 0
    ninety_s_ago = int((time.time() - 90) * 1000)
    r.xadd(keys.jobs, {"kind": "seat_label"}, id=f"{ninety_s_ago}-0")
    r.xadd(keys.jobs, {"kind": "seat_label"}, id=f"{ninety_s_ago + 60_000}-0")
    assert 89 <= opslib.queue_stats(**at).oldest_waiting_s <= 95
    assert 89 <= metrics_reading(redis_url, keys) <= 95
    r.xreadgroup(GROUP, "w1", {keys.jobs: ">"}, count=1)  # delivered: pending, no longer waiting
    assert 29 <= opslib.queue_stats(**at).oldest_waiting_s <= 35
    r.xreadgroup(GROUP, "w1", {keys.jobs: ">"}, count=1)
    assert opslib.queue_stats(**at).oldest_waiting_s == 0 and metrics_reading(redis_url, keys) == 0
