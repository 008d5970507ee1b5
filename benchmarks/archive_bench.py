"""The dead-letter archive's speed: 10,000 dead letters with 2 KB tracebacks archived by one worker.

Measures, on a dedicated embedded valkey-server and PostgreSQL (or
``--redis-url`` / ``--database-url``, under a key prefix and a schema of its
own, removed afterwards):

- archiving: one worker's archiver (``worker.archive.archiver.Archiver``, the chore's
  own code, run back to back) reads 10,000 dead entries through group
  ``archive`` and writes them to ``dead_letters``, 500 per transaction, each
  batch acknowledged after its commit (target < 2 s);
- replay with the archive on: ``replay_kind`` of all 10,000 (each move also
  writes its ``jobs:dead:log`` record), then the archiver applying the 10,000
  records to the rows (for information: no target).

The dead letters are buried by the worker's own bury script
(``benchmarks.fixtures.buried_many``). Each figure is the median of
``--rounds`` runs, each on a fresh queue. Run:
``.venv/bin/python benchmarks/archive_bench.py``.
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

import psycopg
import redis
import redis.asyncio as aioredis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import opslib  # noqa: E402
from benchmarks.fixtures import buried_many, with_schema  # noqa: E402
from worker.archive.archiver import Archiver  # noqa: E402
from worker.embedded.servers import start_postgres, start_redis  # noqa: E402
from worker.settings import Settings  # noqa: E402
from worker.store.keys import Keys  # noqa: E402

ENTRIES = 10_000
TRACEBACK_BYTES = 2048
TARGET_S = 2.0
RUNS_LIMIT = 1000


async def drain(archiver: Archiver, done: int) -> float:
    """Run the archive chore back to back until ``archiver`` counts ``done``; the seconds it took."""
    started = time.perf_counter()
    for _ in range(RUNS_LIMIT):
        await archiver.run()
        if archiver.archived + archiver.applied >= done:
            return time.perf_counter() - started
    raise RuntimeError(f"the archiver did not reach {done} in {RUNS_LIMIT} runs")


async def one_round(redis_url: str, dsn: str) -> tuple[float, float, float, float]:
    """(archive seconds, archive CPU seconds, replay_kind seconds, apply seconds) on a fresh queue."""
    keys = Keys(f"bench:{uuid.uuid4().hex[:8]}:")
    sync = redis.Redis.from_url(redis_url)
    client = aioredis.Redis.from_url(redis_url)
    settings = Settings.from_env({"QUEUE_PREFIX": keys.prefix, "WORKER_NAME": "bench", "ARCHIVE_URL": dsn})
    archiver = Archiver(client, settings, lambda: dsn, migrate=True)  # a throwaway database: create the table
    try:
        buried_many(sync, keys, ENTRIES, traceback_bytes=TRACEBACK_BYTES)
        await archiver.start()
        cpu = time.process_time()
        archive_s = await drain(archiver, ENTRIES)
        archive_cpu = time.process_time() - cpu
        with psycopg.connect(dsn) as conn:
            rows = conn.execute("SELECT count(*) FROM dead_letters WHERE queue = %s", (keys.prefix,)).fetchone()
        assert rows == (ENTRIES,), rows
        started = time.perf_counter()
        done = opslib.replay_kind("seat_label", client=sync, prefix=keys.prefix, conn=dsn)
        replay_s = time.perf_counter() - started
        assert (done["status"] == "replayed").sum() == ENTRIES
        archiver.archived = archiver.applied = 0
        apply_s = await drain(archiver, ENTRIES)
        return archive_s, archive_cpu, replay_s, apply_s
    finally:
        await archiver.close()
        for key in sync.scan_iter(match=f"{keys.prefix}*", count=1000):
            sync.delete(key)
        sync.close()
        await client.aclose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-url", help="use this server (under a fresh key prefix) instead of an embedded one")
    parser.add_argument("--database-url", help="use this PostgreSQL (in a fresh schema) instead of an embedded one")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="archive-bench-"))
    started = []
    if not args.redis_url:
        started.append(start_redis(folder / "valkey"))
    if not args.database_url:
        started.append(start_postgres(folder / "postgres"))
    redis_url = args.redis_url or started[0].url
    database_url = args.database_url or started[-1].url
    schema = f"archive_bench_{uuid.uuid4().hex[:8]}"
    try:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        dsn = with_schema(database_url, schema)
        figures = [asyncio.run(one_round(redis_url, dsn)) for _ in range(args.rounds)]
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        for server in reversed(started):
            server.stop()
    archive, cpu, replay, _apply = (statistics.median(values) for values in zip(*figures, strict=True))
    print(f"the archive on {ENTRIES:,} dead letters with {TRACEBACK_BYTES:,}-byte tracebacks, {args.rounds} rounds")
    print(f"{'step':<44}{'median':>9}{'min':>9}{'max':>9}{'target':>9}")
    verdict = "" if archive <= TARGET_S else "  OVER"
    rows = [
        ("archiving by one worker", [f[0] for f in figures], f"{TARGET_S:.1f}s{verdict}"),
        ("replay_kind() of all, archive on", [f[2] for f in figures], "-"),
        ("archiver applying the 10,000 replay records", [f[3] for f in figures], "-"),
    ]
    for name, values, target in rows:
        median = statistics.median(values)
        print(f"{name:<44}{median:>8.3f}s{min(values):>8.3f}s{max(values):>8.3f}s{target:>9}")
    print(
        f"archiving: {ENTRIES / archive:,.0f} entries/s; this process's CPU {cpu:.3f} s of {archive:.3f} s "
        f"(the servers' excluded); replay {replay:.3f} s"
    )
    print("(wall-clock seconds)")
    return 1 if archive > TARGET_S else 0


if __name__ == "__main__":
    sys.exit(main())
