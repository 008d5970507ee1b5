"""What fair keys cost beside plain jobs: enqueue time a job, a worker's drain rate, and Redis memory.

    .venv/bin/python benchmarks/fair_cost.py [N]

On a server of the benchmark's own (:class:`benchmarks.benchlib.BenchRedis`), N no-op jobs (default
20,000) are enqueued in batches of 1,000 (``enqueue_many``) and 2,000 more one by one (``enqueue``), then
run by one worker of 8 slots in this process in burst mode, three ways: plain jobs, fair jobs of one key,
fair jobs spread over 50 keys, each three times (the medians are printed). Prints the time an enqueue
takes a job, the worker's jobs/s and the per-job difference; then ``MEMORY USAGE`` of ``fair:queue`` and
``fair:last`` holding N jobs of 50 keys and of N keys, against ``jobs`` holding the same N plain jobs:
the bytes a job and a key cost while they wait.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis

from benchmarks.benchlib import BenchRedis
from worker import Job, job_kind, run_worker
from worker.kinds import Registry
from worker.settings import Settings
from worker.store.enqueue import NewJob, enqueue, enqueue_many
from worker.store.keys import Keys

REGISTRY = Registry()
BATCH = 1000
ONE_BY_ONE = 2000
#: Runs of each way; the median of each figure is printed (the machine is shared).
RUNS = 3
#: Plain jobs, fair jobs of one key, fair jobs over 50 keys.
WAYS = (("plain", 0), ("fair, 1 key", 1), ("fair, 50 keys", 50))


@job_kind("bench_fair", registry=REGISTRY)
async def bench_fair(job: Job) -> None:
    """Nothing: what is measured is the way in and out."""


def key_of(keys: int, n: int) -> str | None:
    return None if keys == 0 else f"org-{n % keys}"


def enqueue_us(client: redis.Redis, prefix: str, count: int, keys: int) -> tuple[float, float]:
    """Microseconds a job: ``enqueue_many`` in batches of :data:`BATCH`, then ``enqueue`` one by one."""
    started = time.perf_counter()
    for first in range(0, count, BATCH):
        news = [NewJob("bench_fair", {"n": n}, fair_key=key_of(keys, n)) for n in range(first, first + BATCH)]
        enqueue_many(client, news, prefix=prefix)
    many = (time.perf_counter() - started) / count * 1e6
    started = time.perf_counter()
    for n in range(ONE_BY_ONE):
        enqueue(client, "bench_fair", {"n": n}, fair_key=key_of(keys, n), prefix=prefix)
    return many, (time.perf_counter() - started) / ONE_BY_ONE * 1e6


def drain_rate(url: str, prefix: str, count: int) -> float:
    """Jobs a second for one worker of 8 slots draining ``count`` jobs (burst mode, in this process)."""
    settings = Settings.from_env({"REDIS_URL": url, "QUEUE_PREFIX": prefix, "ARCHIVE_URL": "off"})
    started = time.perf_counter()
    run_worker(settings, registry=REGISTRY, burst=True, stop=threading.Event())
    return count / (time.perf_counter() - started)


def one_run(server: BenchRedis, count: int, keys: int) -> tuple[float, float, float]:
    """One run of one way on an emptied server: both enqueue figures and the drain rate."""
    server.flush()
    prefix = f"bench-fair-{uuid.uuid4().hex[:8]}:"
    many, single = enqueue_us(server.client, prefix, count, keys)
    return many, single, drain_rate(server.url, prefix, count + ONE_BY_ONE)


def memory(client: redis.Redis, count: int, keys: int) -> tuple[int, int]:
    """Bytes of the waiting structures holding ``count`` jobs of ``keys`` keys (0: plain, on ``jobs``)."""
    prefix = f"bench-fair-mem-{uuid.uuid4().hex[:8]}:"
    for first in range(0, count, BATCH):
        news = [NewJob("bench_fair", {"n": n}, fair_key=key_of(keys, n)) for n in range(first, first + BATCH)]
        enqueue_many(client, news, prefix=prefix)
    k = Keys(prefix)
    if keys == 0:
        return int(client.memory_usage(k.jobs, samples=0) or 0), 0
    return int(client.memory_usage(k.fair_queue, samples=0) or 0), int(client.memory_usage(k.fair_last, samples=0) or 0)


def main(count: int) -> None:
    server = BenchRedis()
    try:
        print(f"fair keys: {count} no-op jobs, 1 worker of 8 slots, {server.version}, burst mode")
        rates: dict[str, float] = {}
        for label, keys in WAYS:
            runs = [one_run(server, count, keys) for _ in range(RUNS)]  # the median of each figure
            many, single, rate = (statistics.median(figure) for figure in zip(*runs, strict=True))
            rates[label] = rate
            print(
                f"  {label:<14} enqueue_many {many:6.1f} us/job  enqueue {single:6.1f} us/job  "
                f"worker {rate:8.0f} jobs/s ({1e6 / rate:6.1f} us/job)"
            )
        plain_us = 1e6 / rates["plain"]
        for label in ("fair, 1 key", "fair, 50 keys"):
            print(f"  {label}: {1e6 / rates[label] - plain_us:+.1f} us a job beside plain jobs")
        server.flush()
        plain, _ = memory(server.client, count, 0)
        by_50, last_50 = memory(server.client, count, 50)
        by_n, last_n = memory(server.client, count, count)
        per_plain, per_fair = plain / count, by_50 / count
        print(f"memory, {count} waiting jobs: plain on jobs {per_plain:.0f} B/job, fair:queue {per_fair:.0f} B/job")
        print(f"  fair:last: {last_50} B for 50 keys, {last_n} B for {count} keys ({last_n / count:.0f} B/key)")
        print(f"  fair:queue with {count} keys: {by_n / count:.0f} B/job")
    finally:
        server.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000)
