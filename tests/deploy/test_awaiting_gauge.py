"""The count of jobs waiting for a worker behind ``<ns>_jobs_awaiting_worker``: what it recognises in ``delayed``,
its bounded read ("at least" past the cap, as health says), and its bounded label values."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest
import redis
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

import opslib
from worker.cli.health import awaiting
from worker.observability.awaiting_gauge import AWAITING_SERIES, AwaitingCollector, bounded_labels, read_awaiting_async
from worker.store.awaiting import AWAITING_CAP, Awaiting, awaited, member_awaited, read_due_soon
from worker.store.keys import Keys
from worker.store.wire import decode_member, encode_member


def waiting(kind: str, version: str | None = None, **extra: str) -> str:
    fields = {"kind": kind, "job_id": f"{kind}-{version}-{time.monotonic_ns()}", "waiting_since": "1", **extra}
    return encode_member(fields | ({"v": version} if version else {}))


def read(redis_url: str, parts: list[Keys], now: float) -> Awaiting:
    """:func:`read_awaiting_async` through a client of its own, as the metrics chore reads."""

    async def reading() -> Awaiting:
        client = aioredis.from_url(redis_url)
        try:
            return await read_awaiting_async(client, parts, now)
        finally:
            await client.aclose()

    return asyncio.run(reading())


def test_the_waiting_jobs_are_counted_by_queue_kind_and_version_and_nothing_else_in_delayed(
    r: redis.Redis, prefix: str, redis_url: str
) -> None:
    default, bulk = Keys(prefix), Keys(prefix, queue="bulk")
    now = float(r.time()[0])
    r.zadd(default.delayed, {waiting("send_email", "2"): now + 5, waiting("send_email", "2"): now + 4})
    r.zadd(default.delayed, {waiting("send_sms"): now + 5, encode_member({"kind": "send_email"}): now + 1})
    r.zadd(default.delayed, {waiting("send_email", "3"): now + 3600, "not json": now})  # a day's wait: no hand-back
    r.zadd(bulk.delayed, {waiting("send_email", "2"): now + 5})
    r.zadd(default.throttled, {waiting("send_email", "2"): now})  # promoted, then throttled: waits for its turn
    found = read(redis_url, [default, bulk], now)
    assert found.counts == Counter(
        {("default", "send_email", "2"): 2, ("default", "send_sms", "1"): 1, ("bulk", "send_email", "2"): 1}
    )
    assert (found.capped, found.queues) == (frozenset(), frozenset({"default", "bulk"}))
    line = "; waiting for a worker: 2 send_email v2, 1 send_email v2 in bulk, 1 send_sms v1"
    due = [read_due_soon(r, part.delayed, now) for part in (default, bulk)]  # health's read on a cluster
    assert awaiting(due, ["default", "bulk"]) == line
    table = opslib.kinds(client=r, prefix=prefix)  # all of delayed (the day's wait too), of the queues in use
    assert table.loc["send_email", ["throttled", "awaiting", "awaiting_versions"]].tolist() == [1, 3, "v2: 2, v3: 1"]


def test_past_the_cap_the_count_is_at_least_and_the_capped_series_says_so(
    r: redis.Redis, prefix: str, redis_url: str
) -> None:
    keys = Keys(prefix, queue="bulk")
    now = float(r.time()[0])
    r.zadd(keys.delayed, {encode_member({"kind": "retry", "job_id": str(i)}): now for i in range(AWAITING_CAP - 1)})
    r.zadd(keys.delayed, {waiting("send_email", "2"): now + 5, waiting("send_email", "2"): now + 5})
    found = read(redis_url, [keys], now)
    assert found.counts == Counter({("bulk", "send_email", "2"): 1}) and found.capped == {"bulk"}
    assert awaiting([read_due_soon(r, keys.delayed, now)], ["bulk"]) == (
        "; waiting for a worker: at least 1 send_email v2 in bulk"
    )
    collector = AwaitingCollector("worker", {"send_email"})
    collector.reading = found
    registry = CollectorRegistry()
    registry.register(collector)
    assert registry.get_sample_value("worker_jobs_awaiting_worker_capped", {"queue": "bulk"}) == 1
    labels = {"queue": "bulk", "kind": "send_email", "version": "2"}
    assert registry.get_sample_value("worker_jobs_awaiting_worker", labels) == 1


def test_the_label_values_stay_bounded_whatever_a_producer_writes() -> None:
    counts = Counter({("bulk", "send_email", str(v)): 1000 - v for v in range(1, 500)})
    counts[("bulk", "made_up_kind", "1")] = 5000
    labels = bounded_labels(Awaiting(counts), {"send_email"})
    assert len(labels) == AWAITING_SERIES + 1 and sum(labels.values()) == sum(counts.values())
    assert labels[("bulk", "other", "1")] == 5000  # an undeclared kind is "other", as the job series
    assert labels[("bulk", "send_email", "1")] == 999 and ("bulk", "send_email", "499") not in labels
    assert labels[("bulk", "other", "other")] == sum(1000 - v for v in range(AWAITING_SERIES, 500))


@pytest.mark.parametrize(
    "fields",
    [
        {"kind": "send_email", "v": "2", "waiting_since": "1", "to": 'x","kind":"evil","v":"9'},
        {"kind": 'we"ird\\', "v": "2", "waiting_since": "1"},
        {"kind": "send_sms", "waiting_since": "1", "note": ',"v":"7"'},
        {"kind": "send_sms", "attempts": "1", "body": ',"waiting_since":"1"'},
        {"kind": "käse", "v": "3", "waiting_since": "1"},
        {"v": "2", "waiting_since": "1"},
        {"akind": "x", "kind": "y", "av": "5", "waiting_since": "1"},
        {'a"kind': "evil", "kind": "y", 'a"v': "9", "v": "2", "waiting_since": "1"},
        {"kind": "y", 'a"waiting_since': "1"},
    ],
)
def test_a_member_is_read_without_decoding_as_decoding_reads_it(fields: dict[str, str]) -> None:
    member = encode_member(fields)
    assert member_awaited(member.encode()) == member_awaited(member) == awaited(decode_member(member))


def test_a_member_that_cannot_be_read_is_no_waiting_job() -> None:
    assert member_awaited(b'\xff{"waiting_since":"1"}') is None
    assert member_awaited(b'{"waiting_since":"1","v":2') is None  # v not a string: decoded, and not JSON
