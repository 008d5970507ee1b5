"""The worker's own cost per job, without Redis: start a slot, parse the entry, run a no-op handler, record
the success.

    .venv/bin/python benchmarks/hot_path.py [--jobs 200000] [--runs 5] [--metrics]

Hands batches of 8 prebuilt entries (the fields ``enqueue`` writes) to
:meth:`Slots.start` as the read loop does, and lets the slots finish before
the next batch, on uvloop; the acknowledgements gathered are dropped, never
sent. What a job costs here is what the loop pays for it in CPU beyond the
read and the acknowledgement's round trip: the figure to cut when tuning
``run_entry``, the parse, the observers and the outcome's bookkeeping.
``--metrics`` adds the metrics observer (``METRICS_PORT`` set).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

import redis.asyncio as aioredis
import uvloop

from worker.kinds import Job, Registry, job_kind
from worker.loop.runner import Worker
from worker.observability.metrics import JobCollector
from worker.settings import Settings

BATCH = 8


async def noop(job: Job) -> None:
    """The benchmark's handler: nothing to do."""


def entries(count: int) -> list[tuple[str, dict[bytes, bytes]]]:
    now_ms = int(time.time() * 1000)
    return [
        (f"{now_ms}-{i}", {b"kind": b"noop", b"job_id": uuid.uuid4().hex.encode(), b"attempts": b"0"})
        for i in range(count)
    ]


async def one_run(jobs: int, metrics: bool) -> float:
    registry = Registry()
    job_kind("noop", registry=registry)(noop)
    settings = Settings.from_env({"WORKER_NAME": "hot-path", "ARCHIVE_URL": "off"})
    observers = [JobCollector("")] if metrics else []
    worker = Worker(aioredis.Redis(), settings, registry, observers=observers)  # never connects
    part, slots = worker.parts[0], worker.slots
    todo = entries(jobs)
    started = time.perf_counter()
    for low in range(0, jobs, BATCH):
        for entry_id, raw in todo[low : low + BATCH]:
            slots.start(part, entry_id, raw)
        while slots.inflight:
            await asyncio.sleep(0)
        part.outcomes.take_acks()
    elapsed = time.perf_counter() - started
    await worker.redis.aclose()
    return elapsed / jobs * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--metrics", action="store_true", help="with the metrics observer (METRICS_PORT set)")
    args = parser.parse_args()
    figures = [uvloop.run(one_run(args.jobs, args.metrics)) for _ in range(args.runs)]
    print(
        f"{args.jobs:,} no-op jobs in batches of {BATCH}, no Redis: {statistics.median(figures):.2f} µs a job "
        f"(median of {args.runs}; min {min(figures):.2f}, max {max(figures):.2f})"
    )


if __name__ == "__main__":
    main()
