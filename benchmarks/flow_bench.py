"""The flow counters' Redis memory and ``opslib.throughput()``'s time when full: 20 kinds over 8 days.

    .venv/bin/python benchmarks/flow_bench.py [--kinds 20] [--days 8] [--rounds 3]

On a valkey-server of its own (embedded, flushed before), writes what the
workers would have left after ``--days`` days of every kind busy every
minute: the minute hashes of the last day and the hour hashes of every day
(:mod:`worker.store.flow`), through the flow counter's own flush, with the
buckets a busy kind touches (typical: 8 wait and 8 run buckets a minute, 14
and 14 an hour) or, with ``--worst``, every one of the 28 + 28. Then reads
``INFO memory`` (``used_memory`` above the empty server's) and times
``throughput()`` over the whole window per minute and per hour (median of
``--rounds``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import BenchRedis

import opslib
from worker.observability.flow import FlowCounter
from worker.store.flow import BUCKETS, HOUR_S, MINUTE_S, MINUTES_KEPT_S, RUN, WAIT, bucket_field
from worker.store.keys import Keys


def fields(buckets: int) -> dict[str, int]:
    """One busy period of one kind: every count and ``buckets`` wait and run buckets, non-zero."""
    counted = {"succeeded": 5_000, "retried": 40, "dead": 3}
    for measure in (WAIT, RUN):
        for index in range(min(buckets, BUCKETS)):
            counted[bucket_field(measure, 4 + index if buckets < BUCKETS else index)] = 100 + index
    return counted


async def fill(url: str, kinds: int, days: int, worst: bool) -> int:
    """Write the counters of ``kinds`` busy kinds over ``days`` days; return how many hashes."""
    client = aioredis.Redis.from_url(url)
    counter = FlowCounter(client, Keys(), [f"kind_{k:02d}" for k in range(kinds)], retention_days=days)
    now = int(time.time())
    minute_fields = fields(BUCKETS if worst else 8)
    hour_fields = fields(BUCKETS if worst else 14)
    written = 0
    for period_s, first_s, fields_of in (
        (HOUR_S, now - days * 86_400, hour_fields),
        (MINUTE_S, now - MINUTES_KEPT_S, minute_fields),
    ):
        pipe = client.pipeline(transaction=False)
        for start_s in range(first_s // period_s * period_s, now, period_s):
            for kind in counter.kinds:
                key = counter.keys.flow(period_s, start_s, kind)
                pipe.hset(key, mapping=fields_of)
                pipe.expireat(key, start_s + period_s + (days * 86_400 if period_s == HOUR_S else MINUTES_KEPT_S))
                written += 1
            if len(pipe) > 10_000:
                await pipe.execute()
        await pipe.execute()
    await client.sadd(counter.keys.flow_kinds, *counter.kinds)
    await client.aclose()
    return written


def timed(call: object, rounds: int) -> float:
    figures = []
    for _ in range(rounds):
        begin = time.perf_counter()
        call()  # type: ignore[operator]
        figures.append(time.perf_counter() - begin)
    return statistics.median(figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", type=int, default=20)
    parser.add_argument("--days", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worst", action="store_true", help="every bucket of every period non-zero")
    args = parser.parse_args()
    server = BenchRedis()
    try:
        server.flush()
        empty = int(server.client.info("memory")["used_memory"])
        hashes = asyncio.run(fill(server.url, args.kinds, args.days, args.worst))
        used = int(server.client.info("memory")["used_memory"]) - empty
        since = f"{args.days}d"
        minutes = timed(lambda: opslib.throughput(since=since, client=server.client, prefix=""), args.rounds)
        rows = len(opslib.throughput(since=since, client=server.client, prefix=""))
        hours = timed(lambda: opslib.throughput(since=since, freq="1h", client=server.client, prefix=""), args.rounds)
        last_hour = timed(lambda: opslib.throughput(since="1h", client=server.client, prefix=""), args.rounds)
        print(
            f"{server.version}, {args.kinds} kinds busy every minute for {args.days} days"
            f"{' (every bucket non-zero)' if args.worst else ''}: {hashes:,} hashes, "
            f"{used / 2**20:.1f} MB of Redis memory ({used / hashes:.0f} B a hash)"
        )
        print(
            f"throughput(since='{since}'): {minutes:.2f} s ({rows:,} rows: minutes for the last day, hours before); "
            f"freq='1h': {hours:.2f} s; since='1h': {last_hour * 1000:.0f} ms (median of {args.rounds})"
        )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
