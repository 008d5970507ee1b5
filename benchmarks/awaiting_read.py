"""The cost of ``<ns>_jobs_awaiting_worker`` to the metrics-lock holder: its read and count at the cap.

On a dedicated embedded valkey-server (or ``--redis-url``, under a key prefix
of its own, removed afterwards), each of ``--partitions`` partitions' ``delayed``
holds ``AWAITING_CAP`` (1,000) members due within the hand-back's wait, the
most the holder reads a partition: ``--waiting`` percent of them handed back to
wait for a worker (``waiting_since`` set), the others due retries. The holder's
reading (:func:`worker.observability.awaiting_gauge.read_awaiting_async`: one
pipelined round trip, then the count, which decodes only the members naming
``waiting_since``) is timed ``--reads`` times; the median and the slowest tenth
are printed. Run: ``.venv/bin/python benchmarks/awaiting_read.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import redis
import redis.asyncio as aioredis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from worker.embedded.servers import start_redis  # noqa: E402
from worker.observability.awaiting_gauge import read_awaiting_async  # noqa: E402
from worker.store.awaiting import AWAITING_CAP  # noqa: E402
from worker.store.keys import Keys, queue_partitions  # noqa: E402
from worker.store.wire import encode_member  # noqa: E402

FIELDS = {"kind": "send_email", "v": "2", "to": "ada@example.org", "subject": "Your tickets", "order_id": "4471"}


def fill(client: redis.Redis, parts: list[Keys], waiting_pct: int, now: float) -> int:
    """Fill each partition's ``delayed`` to the cap; return how many members wait for a worker."""
    waiting = 0
    for keys in parts:
        members = {}
        for i in range(AWAITING_CAP):
            waits = i % 100 < waiting_pct
            extra = {"waiting_since": repr(now), "handed_back": "3"} if waits else {"attempts": "1"}
            members[encode_member(FIELDS | {"job_id": f"{keys.partition}-{i}"} | extra)] = now + 5
            waiting += waits
        client.zadd(keys.delayed, members)
    return waiting


async def timed_reads(url: str, parts: list[Keys], now: float, reads: int, waiting: int) -> list[float]:
    """Milliseconds of each of ``reads`` readings, as the metrics chore makes them."""
    client = aioredis.Redis.from_url(url)
    times = []
    try:
        for _ in range(reads):
            started = time.perf_counter()
            found = await read_awaiting_async(client, parts, now)
            times.append((time.perf_counter() - started) * 1000)
            assert sum(found.counts.values()) == waiting, found.counts
    finally:
        await client.aclose()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", help="use this server (under a fresh key prefix) instead of an embedded one")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--waiting", type=int, default=50, help="percent of the members waiting for a worker")
    parser.add_argument("--reads", type=int, default=50)
    args = parser.parse_args()
    server = None if args.redis_url else start_redis(Path(tempfile.mkdtemp(prefix="awaiting-bench-")) / "valkey")
    url = args.redis_url or server.url  # type: ignore[union-attr]
    client = redis.Redis.from_url(url)
    parts = queue_partitions(f"awaiting-bench:{uuid.uuid4().hex[:8]}:", args.partitions)
    try:
        now = float(client.time()[0])
        waiting = fill(client, parts, args.waiting, now)
        times = sorted(asyncio.run(timed_reads(url, parts, now, args.reads, waiting)))
    finally:
        client.delete(*(keys.delayed for keys in parts))
        client.close()
        if server is not None:
            server.stop()
    print(f"{args.partitions} partitions x {AWAITING_CAP:,} due members, {waiting:,} waiting, {args.reads} reads")
    slow = times[len(times) * 9 // 10]
    print(f"a reading: median {statistics.median(times):.1f} ms, slowest tenth from {slow:.1f} ms")


if __name__ == "__main__":
    main()
