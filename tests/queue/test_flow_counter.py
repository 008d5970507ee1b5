"""The flow counter (worker.observability.flow): what a flush writes, and that a failed flush loses nothing."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import redis
import redis.asyncio as aioredis

from worker.embedded.servers import free_port
from worker.observability.flow import FlowCounter
from worker.store.flow import BOUNDS_S, UNDECLARED
from worker.store.keys import Keys
from worker.store.vocabulary import OUTCOME_DEAD, OUTCOME_RETRIED, OUTCOME_SUCCEEDED, REASON_MALFORMED, REASON_PERMANENT


def summed(r: redis.Redis, keys: Keys, period: str, kind: str) -> dict[str, int]:
    """Every field of ``kind``'s hashes of one resolution (``m`` or ``h``), added up."""
    total: dict[str, int] = {}
    for key in r.scan_iter(match=f"{keys.base}flow:{period}:*:{kind}", count=1000):
        for name, n in r.hgetall(key).items():
            total[name.decode()] = total.get(name.decode(), 0) + int(n)
    return total


def report(counter: FlowCounter) -> None:
    counter.job_started("print", 0.0002)
    counter.job_finished("print", OUTCOME_SUCCEEDED, 0.05, None)
    counter.job_started("print", 0.0002)
    counter.job_finished("print", OUTCOME_RETRIED, 2.0, None)
    counter.job_finished("print", OUTCOME_DEAD, 0.01, REASON_PERMANENT)
    counter.job_finished("made-up", OUTCOME_DEAD, 0.0, REASON_MALFORMED)
    counter.job_started("print", 0.0002, "bulk")  # a job of the named queue bulk: counted in bulk's keys
    counter.jobs_succeeded(["print"], [2.0], "bulk")


def test_a_flush_adds_to_the_minute_and_hour_and_a_failed_one_loses_nothing(
    redis_url: str, r: redis.Redis, keys: Keys
) -> None:
    async def scenario() -> None:
        away = aioredis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=1)
        counter = FlowCounter(away, keys, ["print"], retention_days=8)
        report(counter)
        with pytest.raises(redis.exceptions.ConnectionError):
            await counter.flush()
        await away.aclose()
        counter.redis = aioredis.Redis.from_url(redis_url)
        report(counter)  # more counted while Redis was away
        await counter.flush()
        await counter.flush()  # nothing new: writes nothing
        await counter.redis.aclose()

    asyncio.run(scenario())
    # Buckets: 0.2 ms is the bound of bucket 1; 0.05 s falls in 9, 2 s in 15, 10 ms in 7 (bounds double from 0.1 ms).
    assert (BOUNDS_S[1], BOUNDS_S[8] < 0.05 <= BOUNDS_S[9], BOUNDS_S[14] < 2.0 <= BOUNDS_S[15]) == (0.0002, True, True)
    expected = {"succeeded": 2, "retried": 2, "dead": 2, "wait:1": 4, "run:9": 2, "run:15": 2, "run:7": 2}
    for period in ("m", "h"):
        assert summed(r, keys, period, "print") == expected
        assert summed(r, keys, period, UNDECLARED) == {"dead": 2}  # never ran: no run time
    assert {m.decode() for m in r.smembers(keys.flow_kinds)} == {"print", UNDECLARED}
    bulk = dataclasses.replace(keys, queue="bulk")
    for period in ("m", "h"):
        assert summed(r, bulk, period, "print") == {"succeeded": 2, "wait:1": 2, "run:15": 2}
    assert {m.decode() for m in r.smembers(bulk.flow_kinds)} == {"print"}
