"""The producer's side: ``produce.py SYSTEM N`` enqueues N jobs one awaited call at a time and prints
``{"rate": jobs/s, "p50_us": ..., "p99_us": ..., "calls": ..., "cpu_us": ...}`` (per-call latencies, each
call timed; the process's CPU a job, which a loaded machine disturbs less than wall time).

Run by ``benchmarks/producer_bench.py`` with each system's own interpreter: the peers' from
``benchmarks/.venv/<peer>``, this worker's (``ours-*``) from the project's venv. Every job carries the
same three small fields (:data:`FIELDS`); connecting and a warm-up of :data:`WARM_UP` calls stay
outside the clock. ``ours-key`` and ``ours-id`` give each job a unique key or a job id of its own (the guarded
enqueue, one script call); ``ours-fair`` a fair key, :data:`TENANTS` tenants in turn (one script call);
``ours-later`` and ``ours-later-key`` enqueue for later (``delay_s=60``), without and with a key each.
``ours-many`` sends batches of :data:`BATCH` jobs a call (its latencies are per batch). No worker runs:
the jobs stay in the benchmark's own server.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import sys
import time
from collections.abc import Awaitable, Callable

FIELDS = {"order_id": "1042", "email": "ada@example.com", "seat": "12C"}
WARM_UP = 200
BATCH = 1000
TENANTS = 100
URL = os.environ["REDIS_URL"]

Call = Callable[[], object]
AsyncCall = Callable[[], Awaitable[object]]


def nearest_rank(ordered: list[int], q: float) -> float:
    """The ``q``-th percentile of sorted nanoseconds, in microseconds."""
    return ordered[max(1, min(len(ordered), math.ceil(q / 100 * len(ordered)))) - 1] / 1000


def report(count: int, elapsed_s: float, latencies_ns: list[int], cpu_s: float) -> None:
    ordered = sorted(latencies_ns)
    figures = {"rate": count / elapsed_s, "calls": len(ordered), "cpu_us": cpu_s / count * 1e6}
    figures.update(p50_us=nearest_rank(ordered, 50), p99_us=nearest_rank(ordered, 99))
    print(json.dumps(figures))


def timed(call: Call, count: int, per_call: int = 1) -> None:
    """Run ``call`` until ``count`` jobs are sent, ``per_call`` jobs a call, timing each call."""
    for _ in range(max(1, WARM_UP // per_call)):
        call()
    clock = time.perf_counter_ns
    latencies = []
    started, cpu = clock(), time.process_time()
    for _ in range(count // per_call):
        before = clock()
        call()
        latencies.append(clock() - before)
    report(count, (clock() - started) / 1e9, latencies, time.process_time() - cpu)


async def timed_async(call: AsyncCall, count: int) -> None:
    """:func:`timed` for a coroutine function, each call awaited before the next."""
    for _ in range(WARM_UP):
        await call()
    clock = time.perf_counter_ns
    latencies = []
    started, cpu = clock(), time.process_time()
    for _ in range(count):
        before = clock()
        await call()
        latencies.append(clock() - before)
    report(count, (clock() - started) / 1e9, latencies, time.process_time() - cpu)


def ours(mode: str, count: int) -> None:
    import redis
    import redis.asyncio

    from worker.store.enqueue import NewJob, enqueue, enqueue_async, enqueue_many

    if mode == "sync":
        client = redis.Redis.from_url(URL)
        timed(lambda: enqueue(client, "noop", FIELDS), count)
    elif mode in ("key", "id"):  # a guarded enqueue (worker/store/unique.py): one script call, a key each
        client = redis.Redis.from_url(URL)
        numbers = itertools.count()
        option = "unique_key" if mode == "key" else "job_id"
        timed(lambda: enqueue(client, "noop", FIELDS, **{option: f"order-{next(numbers)}"}), count)
    elif mode == "fair":  # a fair job (worker/store/fair.py): one script call, TENANTS keys in turn
        client = redis.Redis.from_url(URL)
        tenants = itertools.cycle([f"org-{n}" for n in range(TENANTS)])
        timed(lambda: enqueue(client, "noop", FIELDS, fair_key=next(tenants)), count)
    elif mode in ("later", "later-key"):  # for later: one EVALSHA of enqueue_later (or enqueue_once, a key each)
        client = redis.Redis.from_url(URL)
        numbers = itertools.count()
        guard = (lambda: {"unique_key": f"order-{next(numbers)}"}) if mode == "later-key" else dict
        timed(lambda: enqueue(client, "noop", FIELDS, delay_s=60, **guard()), count)
    elif mode == "many":
        client = redis.Redis.from_url(URL)
        batch = [NewJob("noop", FIELDS)] * BATCH
        timed(lambda: enqueue_many(client, batch), count, BATCH)
    else:

        async def main() -> None:
            client = redis.asyncio.Redis.from_url(URL)
            await timed_async(lambda: enqueue_async(client, "noop", FIELDS), count)
            await client.aclose()

        asyncio.run(main())


def rq(count: int) -> None:
    from rq import Queue
    from rq_peer import CONNECTION

    queue = Queue(connection=CONNECTION)
    timed(lambda: queue.enqueue("rq_peer.noop", kwargs=FIELDS, result_ttl=0), count)


def arq(count: int) -> None:
    from arq import create_pool
    from arq_peer import SETTINGS

    async def main() -> None:
        pool = await create_pool(SETTINGS)
        await timed_async(lambda: pool.enqueue_job("noop", **FIELDS), count)
        await pool.aclose()

    asyncio.run(main())


def saq(count: int) -> None:
    from saq import Queue

    async def main() -> None:
        queue = Queue.from_url(URL)
        await queue.connect()
        await timed_async(lambda: queue.enqueue("noop", **FIELDS), count)
        await queue.disconnect()

    asyncio.run(main())


def dramatiq(count: int) -> None:
    from dramatiq_peer import noop

    timed(lambda: noop.send(**FIELDS), count)


def celery(count: int) -> None:
    from celery_peer import APP, noop

    noop.typing = False  # the jobs never run: do not check the three fields against noop's signature
    with APP.producer_or_acquire() as producer:
        timed(lambda: noop.apply_async(kwargs=FIELDS, producer=producer), count)


PEERS: dict[str, Callable[[int], None]] = {"rq": rq, "arq": arq, "saq": saq, "dramatiq": dramatiq, "celery": celery}


if __name__ == "__main__":
    system, jobs = sys.argv[1], int(sys.argv[2])
    if system.startswith("ours-"):
        ours(system.removeprefix("ours-"), jobs)
    else:
        PEERS[system](jobs)
