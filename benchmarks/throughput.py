"""One worker process's no-op throughput: enqueue N jobs, run ``python -m worker --burst``, time it.

    .venv/bin/python benchmarks/throughput.py [--jobs 20000] [--runs 3] [--concurrency 8]

A warm-up run of 100 jobs goes first (not counted: Python writes its bytecode
caches). Prints, for each run and as medians: jobs/s counted from the worker's
spawn (Python start-up and imports included) to its last job's finish, jobs/s from
its first job to its last (steady state), the worker's CPU microseconds per
job (its own resource usage, start-up included) and the server's. The server
is a valkey-server started for the run on a free port (or ``--server
/usr/bin/redis-server``), flushed between runs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from benchlib import OURS_ARGV, BenchRedis, enqueue_ours, median_range, ours_env, run_worker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000, help="no-op jobs per run (default 20000)")
    parser.add_argument("--runs", type=int, default=3, help="runs; medians are printed (default 3)")
    parser.add_argument("--concurrency", type=int, default=8, help="WORKER_CONCURRENCY (default 8)")
    parser.add_argument("--server", default="valkey", help="'valkey' (the wheel's) or a redis-server path")
    parser.add_argument("--python", default=sys.executable, help="the worker's interpreter (default: this one)")
    parser.add_argument(
        "--cold",
        action="store_true",
        help="no warm-up, and PYTHONDONTWRITEBYTECODE=1 for the worker: start-up as with no .pyc files installed",
    )
    args = parser.parse_args()

    cold = {"PYTHONDONTWRITEBYTECODE": "1"} if args.cold else {}
    server = BenchRedis(args.server)
    logs = Path(tempfile.mkdtemp(prefix="stagedoor-throughput-"))
    print(f"{args.jobs} no-op jobs, WORKER_CONCURRENCY={args.concurrency}, server {server.version}")
    runs = []
    try:
        for i in range(0 if args.cold else -1, args.runs):
            server.flush()
            enqueue_rate = enqueue_ours(server.client, "noop", args.jobs if i >= 0 else 100)
            run = run_worker(
                (args.python, *OURS_ARGV[1:]),
                env=ours_env(server.url, WORKER_CONCURRENCY=str(args.concurrency), **cold),
                jobs=args.jobs if i >= 0 else 100,
                server=server,
                timeout_s=120,
                log_path=logs / f"run-{i}.log",
                exit_at_target=False,
            )
            if i < 0:
                continue  # the warm-up run: Python writes its bytecode caches
            runs.append(run)
            print(
                f"run {i + 1}: {run.rate_from_start:,.0f} jobs/s from worker start, "
                f"{run.rate_from_first:,.0f} from the first job; "
                f"start-up {run.first - run.spawned:.2f} s; "
                f"worker CPU {run.cpu_us_per_job:.0f} us/job, server CPU {run.redis_cpu_us_per_job:.0f} us/job; "
                f"exit {run.exited - run.last:.2f} s after the last job; enqueue {enqueue_rate:,.0f} jobs/s"
            )
    finally:
        server.stop()
    if len(runs) > 1:
        for label, values in (
            ("jobs/s from worker start", [r.rate_from_start for r in runs]),
            ("jobs/s from the first job", [r.rate_from_first for r in runs]),
            ("worker CPU us/job", [r.cpu_us_per_job for r in runs]),
            ("server CPU us/job", [r.redis_cpu_us_per_job for r in runs]),
        ):
            med, low, high = median_range(values)
            print(f"median {label}: {med:,.0f} (min {low:,.0f}, max {high:,.0f})")


if __name__ == "__main__":
    main()
