"""opslib's speed on a full dead stream: 10,000 dead letters, each with a 2 KB traceback.

Measures, on a dedicated embedded valkey-server (or ``--redis-url``, under a
key prefix of its own, deleted afterwards):

- ``dead_letters()``: read and convert every entry (target < 0.5 s);
- ``failure_groups(dead)``: group them by error signature (target < 0.3 s);
- ``replay_kind(kind)``: read, filter and move all 10,000 back to ``jobs``
  with pipelined replay-script calls (target < 2 s);

and, on a dedicated embedded PostgreSQL (or ``--database-url``, in a schema
of its own, dropped afterwards), the reads of the dead-letter archive over
1,000,000 rows (``benchmarks/archive_reads.py``):

- ``archive(kind, since=...)``: one kind's last day (target < 1 s);
- ``history(freq="1h")``: the whole archive per hour and kind (target < 1 s).

The dead letters are buried by the worker's own bury script
(``benchmarks.fixtures.buried_many``). Each figure is the median of
``--rounds`` runs (a replay needs a fresh dead stream, so each replay round
buries 10,000 again first). Run: ``.venv/bin/python benchmarks/opslib_bench.py``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# These figures are Redis's (no PostgreSQL here); benchmarks/archive_bench.py measures with the archive on.
os.environ.setdefault("ARCHIVE_URL", "off")

import opslib  # noqa: E402
from benchmarks.archive_reads import ROWS as ARCHIVE_ROWS  # noqa: E402
from benchmarks.archive_reads import TARGETS_S as ARCHIVE_TARGETS_S  # noqa: E402
from benchmarks.archive_reads import measure_archive_reads  # noqa: E402
from benchmarks.fixtures import buried_many  # noqa: E402
from worker.embedded.servers import start_postgres, start_redis  # noqa: E402
from worker.store.keys import Keys  # noqa: E402

ENTRIES = 10_000
TRACEBACK_BYTES = 2048
TARGETS_S = {"dead_letters()": 0.5, "failure_groups(dead)": 0.3, "replay_kind() of all": 2.0, **ARCHIVE_TARGETS_S}


CPU: dict[str, list[float]] = {name: [] for name in TARGETS_S}
"""This process's CPU time per call: opslib's own cost, whatever else the machine runs."""


def timed(name: str, call: Callable[[], object]) -> tuple[float, object]:
    started, cpu = time.perf_counter(), time.process_time()
    result = call()
    CPU[name].append(time.process_time() - cpu)
    return time.perf_counter() - started, result


def clear(client: redis.Redis, keys: Keys) -> None:
    for key in client.scan_iter(match=f"{keys.prefix}*", count=1000):
        client.delete(key)


def measure(client: redis.Redis, keys: Keys, rounds: int) -> dict[str, list[float]]:
    at = {"client": client, "prefix": keys.prefix}
    times: dict[str, list[float]] = {name: [] for name in TARGETS_S}
    buried_many(client, keys, ENTRIES, traceback_bytes=TRACEBACK_BYTES)
    dead = opslib.dead_letters(**at)
    assert len(dead) == ENTRIES and dead["traceback"].str.len().min() == TRACEBACK_BYTES
    for _ in range(rounds):
        elapsed, dead = timed("dead_letters()", lambda: opslib.dead_letters(**at))
        times["dead_letters()"].append(elapsed)
        elapsed, groups = timed("failure_groups(dead)", lambda: opslib.failure_groups(dead))  # noqa: B023
        times["failure_groups(dead)"].append(elapsed)
        assert groups["count"].tolist() == [ENTRIES]  # type: ignore[index]
    for round_ in range(rounds):
        if round_:
            clear(client, keys)
            buried_many(client, keys, ENTRIES, traceback_bytes=TRACEBACK_BYTES)
        elapsed, done = timed("replay_kind() of all", lambda: opslib.replay_kind("seat_label", **at))
        times["replay_kind() of all"].append(elapsed)
        assert (done["status"] == "replayed").sum() == ENTRIES  # type: ignore[index]
        assert client.xlen(keys.dead) == 0
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-url", help="use this server (under a fresh key prefix) instead of an embedded one")
    parser.add_argument(
        "--database-url", help="use this PostgreSQL (in a schema of its own) instead of an embedded one"
    )
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="opslib-bench-"))
    server = None if args.redis_url else start_redis(folder / "valkey")
    client = redis.Redis.from_url(args.redis_url or server.url)  # type: ignore[union-attr]
    keys = Keys(f"bench:{uuid.uuid4().hex[:8]}:")
    try:
        times = measure(client, keys, args.rounds)
    finally:
        clear(client, keys)
        client.close()
        if server is not None:
            server.stop()
    postgres = None if args.database_url else start_postgres(folder / "postgres")
    try:
        times |= measure_archive_reads(args.database_url or postgres.url, args.rounds, timed)  # type: ignore[union-attr]
    finally:
        if postgres is not None:
            postgres.stop()
        shutil.rmtree(folder, ignore_errors=True)
    print(f"opslib on {ENTRIES:,} dead letters with {TRACEBACK_BYTES:,}-byte tracebacks, {args.rounds} rounds")
    print(f"and the archive's reads over {ARCHIVE_ROWS:,} archived dead letters")
    print(f"{'call':<28}{'median':>10}{'min':>10}{'max':>10}{'cpu':>10}{'target':>10}")
    over = 0
    for name, values in times.items():
        median, target = statistics.median(values), TARGETS_S[name]
        over += median > target
        verdict = "" if median <= target else "  OVER"
        cpu = statistics.median(CPU[name])
        print(f"{name:<28}{median:>9.3f}s{min(values):>9.3f}s{max(values):>9.3f}s{cpu:>9.3f}s{target:>9.1f}s{verdict}")
    print("(wall-clock seconds; cpu: this process's median CPU time, the server's excluded)")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
