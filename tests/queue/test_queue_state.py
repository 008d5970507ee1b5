"""The one reader of the queue's state: the metrics gauges and ``opslib.queue_stats`` give the same
numbers for the same moment, and the pure parsing of the replies (no Redis) for the edge cases."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime

import pytest
import redis
import redis.asyncio as aioredis
import redis.exceptions
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

import opslib
from benchmarks.fixtures import ensure_group
from opslib.queries import STAT_NAMES
from tests.opslib.helpers import bury
from worker.kinds import Registry
from worker.observability.metrics import Metrics
from worker.observability.queue_state import (
    Consumer,
    QueueState,
    combined,
    lag_to_count,
    read_queue_state,
    state_of,
)
from worker.settings import Settings
from worker.store.enqueue import enqueue
from worker.store.heartbeats import HEARTBEAT_TTL_S, beat, live_workers
from worker.store.keys import GROUP, Keys

RECLAIM_IDLE_MS = 60_000

#: queue_stats().counts row -> the metric that exports the same number.
METRIC_OF_STAT = {
    "lag": "worker_queue_lag",
    "pending": "worker_queue_pending",
    "pending_idle": "worker_queue_pending_idle",
    "delayed": "worker_queue_delayed",
    "delayed_due": "worker_queue_delayed_due",
    "dead": "worker_queue_dead_length",
    "dead_evicted": "worker_queue_dead_evicted_total",
    "consumers_live": "worker_queue_consumers_live",
    "paused_kinds": "worker_queue_paused_kinds",
    "parked": "worker_queue_parked",
    "throttled": "worker_queue_throttled",
    "fair": "worker_queue_fair",
}


def seed(r: redis.Redis, keys: Keys) -> None:
    """A queue with a bit of everything: a live consumer and a dead one (its entry idle beyond the reclaim
    threshold), a worker alive but not yet in the group's list, an undelivered job, delayed jobs due and
    not, dead letters and evictions."""
    ensure_group(r, keys)
    bury(r, keys, {"kind": "seat_label", "job_id": "d1", "attempts": "0"}, {"error": "E: 1", "reason": "exhausted"})
    bury(r, keys, {"kind": "seat_label", "job_id": "d2", "attempts": "0"}, {"error": "E: 2", "reason": "exhausted"})
    r.set(keys.dead_evicted, 5)
    enqueue(r, "ok", {"job_id": "running"}, prefix=keys.prefix)
    r.xreadgroup(GROUP, "alive-worker", {keys.jobs: ">"}, count=1)
    ghost_entry = enqueue(r, "ok", {"job_id": "orphaned"}, prefix=keys.prefix)
    r.xreadgroup(GROUP, "ghost", {keys.jobs: ">"}, count=1)
    r.xclaim(keys.jobs, GROUP, "ghost", 0, [ghost_entry], idle=2 * RECLAIM_IDLE_MS)
    enqueue(r, "ok", {"job_id": "waiting"}, prefix=keys.prefix)
    enqueue(r, "ok", {"job_id": "due"}, run_at=time.time() - 5, prefix=keys.prefix)
    enqueue(r, "ok", {"job_id": "later-1"}, delay_s=3600, prefix=keys.prefix)
    enqueue(r, "ok", {"job_id": "later-2"}, delay_s=7200, prefix=keys.prefix)
    r.zadd(keys.workers, {"alive-worker": time.time() + 60})
    r.zadd(keys.workers, {"fresh-worker": time.time() + 60})  # started, not handed an entry yet
    r.zadd(keys.workers, {"expired-worker": time.time() - 1})  # died without its goodbye
    since = datetime.fromtimestamp(time.time() - 90, UTC).isoformat()
    r.hset(keys.paused, "ok", json.dumps({"since": since, "by": "ana", "reason": "seat map fix"}))
    r.zadd(keys.parked, {'ok\x00{"job_id":"held"}': 0})
    r.zadd(keys.throttled, {'{"job_id":"turn","kind":"ok"}': time.time() + 60})


async def refreshed_metrics(redis_url: str, settings: Settings) -> bytes:
    """What a worker's metrics export after one refresh (as the lock holder), in the exposition format."""
    client = aioredis.Redis.from_url(redis_url)
    metrics = Metrics(settings, client, Registry())
    try:
        await metrics.refresh_queue_state()
        return generate_latest(metrics.registry)
    finally:
        await metrics.close()
        await client.aclose()


def metrics_samples(redis_url: str, prefix: str) -> dict[str, float]:
    """The queue-wide series a worker's metrics export after one refresh (as the lock holder)."""
    settings = Settings.from_env({"QUEUE_PREFIX": prefix, "RECLAIM_IDLE_MS": str(RECLAIM_IDLE_MS)})
    scraped = text_string_to_metric_families(asyncio.run(refreshed_metrics(redis_url, settings)).decode())
    return {s.name: s.value for family in scraped for s in family.samples if s.name.startswith("worker_queue_")}


def test_metrics_and_queue_stats_give_the_same_numbers(r: redis.Redis, keys: Keys, redis_url: str) -> None:
    seed(r, keys)
    stats = opslib.queue_stats(reclaim_idle_ms=RECLAIM_IDLE_MS, client=r, prefix=keys.prefix)
    exported = metrics_samples(redis_url, keys.prefix)

    counts = stats.counts["value"].to_dict()
    waited = counts.pop("oldest_waiting_s")  # the waiting entry was added by seed() a moment ago
    assert 0 <= waited <= 5 and abs(exported["worker_queue_oldest_waiting_seconds"] - waited) <= 1
    assert {stat: exported[metric] for stat, metric in METRIC_OF_STAT.items()} == {
        stat: counts[stat] for stat in METRIC_OF_STAT
    }
    assert counts == {
        "stream_length": 3,  # running, orphaned, waiting (burying removed the dead ones)
        "lag": 1,
        "pending": 2,
        "pending_idle": 1,
        "delayed": 3,
        "delayed_due": 1,
        "dead": 2,
        "dead_evicted": 5,
        "consumers": 3,  # alive-worker, ghost, and the seeder that buried the dead letters
        "consumers_live": 2,  # alive-worker and fresh-worker
        "paused_kinds": 1,
        "oldest_pause_s": 90,
        "parked": 1,
        "throttled": 1,
        "fair": 0,
    }
    assert stats.paused.loc["ok", "by"] == "ana" and stats.paused.loc["ok", "reason"] == "seat map fix"
    listed = stats.consumers.set_index("consumer")
    assert listed["heartbeat"].to_dict() == {"alive-worker": True, "ghost": False, "seeder": False}
    assert listed["pending"].to_dict() == {"alive-worker": 1, "ghost": 1, "seeder": 0}


def test_a_queue_never_read_reads_as_zeros_with_its_entries_as_lag(r: redis.Redis, keys: Keys) -> None:
    assert read_queue_state(r, keys, reclaim_idle_ms=RECLAIM_IDLE_MS) == QueueState(
        0, 0, 0.0, 0, 0, 0, 0, 0, 0, (), 0, 0, 0.0, 0, 0, 0
    )
    r.xadd(keys.jobs, {"kind": "ok"})  # a stream without the group
    state = read_queue_state(r, keys, reclaim_idle_ms=RECLAIM_IDLE_MS)
    assert (state.stream_length, state.lag, state.pending, state.consumers) == (1, 1, 0, ())


def test_live_workers_are_the_unexpired_members_and_a_beat_prunes_the_expired(r: redis.Redis, keys: Keys) -> None:
    now = time.time()
    r.zadd(keys.workers, {"w1": now + 60, "expired": now - 1})
    r.zadd(Keys(keys.prefix + "x").workers, {"w2": now + 60})  # another queue's
    assert live_workers(r, keys) == {"w1"}
    pipe = r.pipeline(transaction=False)
    beat(pipe, keys, "w3", now)
    pipe.execute()
    assert live_workers(r, keys) == {"w1", "w3"}
    assert {m.decode() for m in r.zrange(keys.workers, 0, -1)} == {"w1", "w3"}  # the expired was pruned
    assert r.zscore(keys.workers, "w3") == pytest.approx(now + HEARTBEAT_TTL_S)


# ---------------------------------------------------------------- pure parsing

GROUP_INFO = {"name": b"workers", "pending": 2, "last-delivered-id": b"5-0", "lag": 3}
CONSUMERS = [{"name": b"w1", "pending": 2, "idle": 900}, {"name": b"gone", "pending": 0, "idle": 10}]


PAUSED = [b'{"since": "2026-11-30T21:00:00+00:00", "by": "ana", "reason": "seat map"}']
PAUSED_AT = datetime(2026, 11, 30, 21, 0, tzinfo=UTC).timestamp()


def replies(group: dict[str, object] = GROUP_INFO) -> list[object]:
    return [7, [group], CONSUMERS, [{"message_id": b"1-0"}], 4, 1, 9, b"2", PAUSED, 5, 6, 8]


def test_the_replies_become_the_state() -> None:
    assert state_of(replies(), {"w1", "w2"}, now=PAUSED_AT + 7200.5) == QueueState(
        stream_length=7,
        lag=3,
        pending=2,
        pending_idle=1,
        delayed=4,
        delayed_due=1,
        dead=9,
        dead_evicted=2,
        consumers=(Consumer("w1", 2, 900, live=True), Consumer("gone", 0, 10, live=False)),
        consumers_live=2,
        oldest_waiting_s=0.0,
        paused_kinds=1,
        oldest_pause_s=7200.5,
        parked=5,
        throttled=6,
        fair=8,
    )


def test_a_lag_redis_cannot_report_is_counted() -> None:
    unknown = replies({**GROUP_INFO, "lag": None})
    assert lag_to_count(replies()) is None
    assert lag_to_count(unknown) == "5-0"
    assert state_of(unknown, set(), undelivered=6).lag == 6
    with pytest.raises(ValueError, match="count the undelivered entries"):
        state_of(unknown, set())


def test_a_missing_group_reads_as_empty_and_other_errors_raise() -> None:
    nogroup = redis.exceptions.ResponseError("NOGROUP No such key 'jobs' or consumer group 'workers'")
    missing = [3, redis.exceptions.ResponseError("no such key"), nogroup, nogroup, 0, 0, 0, None, [], 0, 0, 0]
    state = state_of(missing, set())
    assert (state.stream_length, state.lag, state.pending, state.consumers, state.dead_evicted) == (3, 3, 0, (), 0)
    denied = replies()
    denied[6] = redis.exceptions.NoPermissionError("NOPERM this user has no permissions to run the 'xlen' command")
    with pytest.raises(redis.exceptions.NoPermissionError):
        state_of(denied, set())


def test_partitions_combine_as_each_field_declares() -> None:
    one = state_of(replies(), {"w1", "w2"}, oldest_waiting_s=4.0)
    other = state_of(replies(), {"w1", "w2"}, oldest_waiting_s=9.0)
    both = combined([one, other])
    assert (both.stream_length, both.lag, both.pending, both.dead, both.dead_evicted) == (14, 6, 4, 18, 4)
    assert (both.oldest_waiting_s, both.consumers_live) == (9.0, 2)  # the longest wait; heartbeats counted once
    assert (both.paused_kinds, both.parked) == (1, 10)  # every partition holds the pause; parked jobs add up
    assert both.consumers == (Consumer("w1", 4, 900, live=True), Consumer("gone", 0, 10, live=False))
    assert tuple(vars(both)) == STAT_NAMES  # queue_stats() shows every field, in the dataclass's order
