"""The throttle's accuracy: the measured start rate of a throttled kind at 1 to 1,000/s over two workers.

    .venv/bin/python benchmarks/throttle_bench.py [--rates 1,2,4,8,20,100,1000] [--seconds 10] [--workers 2]

On a valkey-server of its own (flushed between rates), for each rate: the
kind is throttled with ``opslib.throttle``, ``rate * seconds + 1`` jobs wait
on ``jobs``, and ``--workers`` burst workers (``python -m worker --burst``)
run them. Each handler records when it started (``benchmarks/throttle_kinds.py``);
the figures are the start rate (the starts after the first over the time they
took), its error against the set rate, and the most starts in any one-second
window (the throttle allows the rate plus one).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import BENCH_DIR, ROOT, BenchRedis, child_env
from fixtures import rate_and_peak
from throttle_kinds import started_key

import opslib
import worker

PREFIX = "bench:"
KIND = "paced"


def measure(server: BenchRedis, rate: float, seconds: float, workers: int) -> tuple[int, float, int]:
    """Jobs run, their start rate and their busiest second, at ``rate`` over ``workers`` workers."""
    server.flush()
    jobs = int(rate * seconds) + 1
    for low in range(0, jobs, 1000):
        batch = [worker.NewJob(KIND, {"job_id": f"{KIND}-{n}"}) for n in range(low, min(jobs, low + 1000))]
        worker.enqueue_many(server.client, batch, prefix=PREFIX)
    opslib.throttle(KIND, rate, reason="throttle benchmark", client=server.client, prefix=PREFIX)
    env = child_env(
        REDIS_URL=server.url, QUEUE_PREFIX=PREFIX, WORKER_KINDS="throttle_kinds", ARCHIVE_URL="off",
        LOG_LEVEL="WARNING", PYTHONPATH=os.pathsep.join([str(BENCH_DIR), str(ROOT)]),
    )  # fmt: skip
    argv = [sys.executable, "-m", "worker", "--burst"]
    procs = [subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL) for _ in range(workers)]
    try:
        for proc in procs:
            proc.wait(timeout=seconds * 3 + 60)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    started = sorted(float(value) for value in server.client.hvals(started_key(PREFIX)))
    measured, peak = rate_and_peak(started)
    return len(started), measured, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1,2,4,8,20,100,1000", help="the rates to set, jobs a second")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of backlog at each rate")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    server = BenchRedis()
    try:
        print(f"{server.version}, {args.workers} workers, {args.seconds:g} s of backlog per rate, {time.ctime()}")
        print(f"{'set/s':>7} {'jobs':>6} {'measured/s':>11} {'error':>7} {'busiest 1 s':>12} {'allowed':>8}")
        for rate in (float(text) for text in args.rates.split(",")):
            jobs, measured, peak = measure(server, rate, args.seconds, args.workers)
            error = (measured - rate) / rate * 100
            print(f"{rate:>7g} {jobs:>6} {measured:>11.3f} {error:>+6.1f}% {peak:>12} {int(rate) + 1:>8}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
