"""``make bench``, the producer's side: this worker's enqueue beside BullMQ, rq, arq, Dramatiq, saq and Celery.

One process per run enqueues ``--jobs`` (20,000) jobs of three small fields, each call awaited before
the next (``benchmarks/peers/produce.py``, ``benchmarks/bullmq/producer.mjs``), into a dedicated server
flushed before every run; runs interleaved (A B C ... A B C ...) so the machine's drift hits every system
alike; medians of ``--rounds`` (3) with min-max, the producer's CPU a job, the round trips a job
(the server's replies written, ``total_writes_processed`` of ``INFO stats`` after ``CONFIG RESETSTAT``;
connecting and the warm-up included; a script's inner commands are not replies) and the load average beside.
Printed with the issue's targets (one at a time >= 1.5x BullMQ's awaited ``add`` and >= 1.2x the best
Python peer, p99 <= 1 ms, ``enqueue_many`` >= ``addBulk``), and written to ``benchmarks/results/``.
Figures: docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import UTC, datetime

from benchlib import BENCH_DIR, BenchError, BenchRedis, child_env, median_range

RESULTS = BENCH_DIR / "results"
PRODUCE = str(BENCH_DIR / "peers" / "produce.py")
BULLMQ = ("node", str(BENCH_DIR / "bullmq" / "producer.mjs"))


def peer(name: str) -> tuple[str, ...]:
    return (str(BENCH_DIR / ".venv" / name / "bin" / "python"), PRODUCE, name)


#: name shown -> the command that produces (the job count is appended).
SYSTEMS: dict[str, tuple[str, ...]] = {
    "stagedoor enqueue": (sys.executable, PRODUCE, "ours-sync"),
    "stagedoor enqueue unique_key= (a key each)": (sys.executable, PRODUCE, "ours-key"),
    "stagedoor enqueue job_id= (an id each)": (sys.executable, PRODUCE, "ours-id"),
    "stagedoor enqueue fair_key= (100 tenants)": (sys.executable, PRODUCE, "ours-fair"),
    "stagedoor enqueue delay_s= (for later)": (sys.executable, PRODUCE, "ours-later"),
    "stagedoor enqueue delay_s= unique_key=": (sys.executable, PRODUCE, "ours-later-key"),
    "stagedoor enqueue_async": (sys.executable, PRODUCE, "ours-async"),
    "stagedoor enqueue_many (1,000 a call)": (sys.executable, PRODUCE, "ours-many"),
    "BullMQ 6.7 add (awaited)": (*BULLMQ, "add"),
    "BullMQ 6.7 addBulk (1,000 a call)": (*BULLMQ, "addBulk"),
    "rq 2.12 enqueue": peer("rq"),
    "arq 0.28 enqueue_job": peer("arq"),
    "Dramatiq 2.2 send": peer("dramatiq"),
    "saq 0.26 enqueue": peer("saq"),
    "Celery 5.7 apply_async": peer("celery"),
}
PYTHON_PEERS = ("rq", "arq", "Dramatiq", "saq", "Celery")


def produce(argv: tuple[str, ...], server: BenchRedis, jobs: int, source: str = "") -> dict[str, float]:
    """One producer run on a flushed server: its figures. ``source``: a folder whose ``worker`` package is
    imported instead of this checkout's (the A/B against another version)."""
    server.flush()
    server.client.config_resetstat()
    path = [source] if source else []
    env = child_env(REDIS_URL=server.url, PYTHONPATH=os.pathsep.join([*path, str(BENCH_DIR / "peers"), str(BENCH_DIR)]))
    done = subprocess.run([*argv, str(jobs)], env=env, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise BenchError(f"{' '.join(argv)} failed: {last}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    replies = server.client.info("stats")["total_writes_processed"]  # the INFO's own reply not yet written
    return {**figures, "load_1m": os.getloadavg()[0], "round_trips_a_job": replies / jobs}


def verdicts(table: dict[str, dict[str, float]]) -> list[str]:
    """Each target of the issue, met or missed, and by how much."""
    ours, ours_async = table["stagedoor enqueue"], table["stagedoor enqueue_async"]
    add, bulk = table["BullMQ 6.7 add (awaited)"], table["BullMQ 6.7 addBulk (1,000 a call)"]
    best = max((n for n in table if n.startswith(PYTHON_PEERS)), key=lambda n: table[n]["rate"])
    lines = []
    for label, row in (("enqueue", ours), ("enqueue_async", ours_async)):
        lines.append(f"{label}: {row['rate'] / add['rate']:.2f}x BullMQ's awaited add (target >= 1.5x)")
        lines.append(f"{label}: {row['rate'] / table[best]['rate']:.2f}x the best Python peer, {best} (>= 1.2x)")
        lines.append(f"{label}: p99 {row['p99_us']:.0f} us (target <= 1000 us)")
    many = table["stagedoor enqueue_many (1,000 a call)"]
    lines.append(f"enqueue_many: {many['rate'] / bulk['rate']:.2f}x addBulk (target >= 1x)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", help="comma-separated words; systems whose name holds one of them")
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="also run ours with the worker package in DIR (`git archive main worker | tar -x -C DIR`)",
    )
    args = parser.parse_args()
    words = args.only.split(",") if args.only else []
    systems = {n: (a, "") for n, a in SYSTEMS.items() if not words or any(w in n for w in words)}
    if args.baseline:
        for name, (argv, _) in list(systems.items()):
            if name.startswith("stagedoor"):
                systems[f"{name} [baseline]"] = (argv, args.baseline)
    server = BenchRedis()
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in systems}
    try:
        for _ in range(args.rounds):
            for name, (argv, source) in systems.items():
                runs[name].append(produce(argv, server, args.jobs, source))
    finally:
        server.stop()
    table = {}
    print(f"{args.jobs:,} jobs of three small fields, one process, each call awaited; {server.version}; "
          f"median of {args.rounds} (min-max); {os.cpu_count()} cores")  # fmt: skip
    for name, figures in runs.items():
        rate, low, high = median_range([f["rate"] for f in figures])
        p50, p99, cpu, load, trips = (
            median_range([f[k] for f in figures])[0]
            for k in ("p50_us", "p99_us", "cpu_us", "load_1m", "round_trips_a_job")
        )
        table[name] = {"rate": rate, "p50_us": p50, "p99_us": p99, "cpu_us": cpu, "load_1m": load}
        print(f"  {name:40} {rate:>9,.0f} jobs/s ({low:,.0f}-{high:,.0f})  p50 {p50:>7.0f} us  "
              f"p99 {p99:>7.0f} us per call  CPU {cpu:>5.1f} us a job  {trips:.2f} round trips a job  "
              f"load {load:.1f}")  # fmt: skip
    if all(name in table for name in SYSTEMS):  # the targets, when every system ran
        for line in verdicts(table):
            print(f"  {line}")
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    (RESULTS / f"producer-{stamp}.json").write_text(json.dumps({"args": vars(args), "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
