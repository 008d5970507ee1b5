"""The backlog gauge (``<ns>_backlog``, :mod:`worker.observability.backlog`) on a single server: equal to
the ground truth after XDEL, XTRIM, pause, delayed due, throttle and the fair feeder's moves, with fair-key jobs
waiting, on ``default`` and on ``bulk``, page by page too, and exported by a
worker's metrics with its ``queue`` and ``partition`` labels."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis
import redis.asyncio as aioredis
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.queue import helpers_backlog as backlog_scenario
from tests.queue.test_queue_state import refreshed_metrics
from worker import Job, RetryPolicy
from worker.kinds import KindSpec, Registry
from worker.observability import backlog
from worker.observability.metrics import Metrics
from worker.settings import Settings
from worker.store.enqueue import enqueue
from worker.store.keys import GROUP, Keys
from worker.store.partitions import partition_keys


@pytest.mark.parametrize("queue", ["default", "bulk"])
@pytest.mark.parametrize("page", [backlog.BACKLOG_PAGE, 2])
def test_the_gauge_equals_the_ground_truth_after_every_change(
    r: redis.Redis, prefix: str, queue: str, page: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backlog, "BACKLOG_PAGE", page)  # 2: every count takes several pages on each side
    backlog_scenario.run(r, Keys(prefix, queue=queue))


def test_past_the_limit_on_both_sides_the_count_says_it_is_not_exact(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backlog, "BACKLOG_PAGE", 2)
    monkeypatch.setattr(backlog, "BACKLOG_COUNT_LIMIT", 4)
    r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
    for n in range(20):
        r.xadd(keys.jobs, {"kind": "greet", "job_id": f"j{n}", "attempts": "0"})
    r.xreadgroup(GROUP, "c1", {keys.jobs: ">"}, count=10)  # 10 on each side of the read position
    found = backlog_scenario.reading(r, keys, time.time())
    assert not found.exact
    assert 4 <= found.undelivered <= 16
    assert found.undelivered == 10  # Redis's lag, valid here, kept between the two partial counts


def test_a_queue_never_read_counts_every_entry(r: redis.Redis, keys: Keys) -> None:
    for n in range(3):
        r.xadd(keys.jobs, {"kind": "greet", "job_id": f"j{n}", "attempts": "0"})
    found = backlog_scenario.reading(r, keys, time.time())
    assert (found.backlog, found.running, found.exact) == (3, 0, True)


def test_a_worker_exports_the_backlog_per_queue_and_partition(r: redis.Redis, prefix: str, redis_url: str) -> None:
    settings = Settings.from_env({"QUEUE_PREFIX": prefix, "QUEUE_PARTITIONS": "2"})
    parts = partition_keys(settings)
    for keys in parts:
        r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
    for n in range(3):
        r.xadd(parts[1].jobs, {"kind": "greet", "job_id": f"j{n}", "attempts": "0"})
    r.zadd(parts[0].delayed, {backlog_scenario.member("greet", "d"): time.time() - 1})

    samples = {
        (s.name, s.labels["queue"], s.labels["partition"]): s.value
        for family in text_string_to_metric_families(asyncio.run(refreshed_metrics(redis_url, settings)).decode())
        for s in family.samples
        if s.name in ("worker_backlog", "worker_running")
    }
    assert samples == {
        ("worker_backlog", "default", "0"): 1,
        ("worker_backlog", "default", "1"): 3,
        ("worker_running", "default", "0"): 0,
        ("worker_running", "default", "1"): 0,
    }


def test_each_queue_in_use_has_its_own_backlog_series(r: redis.Redis, prefix: str, redis_url: str) -> None:
    settings = Settings.from_env({"QUEUE_PREFIX": prefix})
    bulk = Keys(prefix, queue="bulk")
    r.xgroup_create(Keys(prefix).jobs, GROUP, id="0", mkstream=True)
    for n in range(4):
        enqueue(r, "greet", {"job_id": f"b{n}"}, prefix=prefix, queue="bulk")  # adds bulk to the queues in use
    assert r.xlen(bulk.jobs) == 4

    samples = {
        (s.labels["queue"], s.labels["partition"]): s.value
        for family in text_string_to_metric_families(asyncio.run(refreshed_metrics(redis_url, settings)).decode())
        for s in family.samples
        if s.name == "worker_backlog"
    }
    assert samples == {("default", "0"): 0, ("bulk", "0"): 4}


def test_a_worker_exports_a_zero_for_every_queue_it_serves_or_declares(prefix: str, redis_url: str) -> None:
    settings = Settings.from_env({"QUEUE_PREFIX": prefix, "WORKER_QUEUES": "critical:2,default:1"})
    registry = Registry()
    registry.add(KindSpec("archive_month", _never_run, RetryPolicy(), None, True, queue="bulk"))
    metrics = Metrics(settings, aioredis.Redis.from_url(redis_url), registry)

    async def scrape() -> bytes:
        try:
            await metrics.refresh_queue_state()  # nothing enqueued anywhere: no queue is in use yet
            return generate_latest(metrics.registry)
        finally:
            await metrics.close()
            await metrics.redis.aclose()

    samples = {
        (s.name, s.labels["queue"]): s.value
        for family in text_string_to_metric_families(asyncio.run(scrape()).decode())
        for s in family.samples
        if s.name in ("worker_backlog", "worker_running")
    }
    assert samples == {(name, q): 0 for name in ("worker_backlog", "worker_running") for q in QUEUES}


QUEUES = ("default", "critical", "bulk")


async def _never_run(job: Job) -> None:
    raise AssertionError("no job runs here")
