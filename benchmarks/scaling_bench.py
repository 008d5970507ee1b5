"""How the workers scale on this machine, as an autoscaler would add them, and what the backlog gauge
costs at depth (docs/operations.md, "On Kubernetes"). Prints figures; times nothing in a test.

1. Replicas: R separate ``python -m worker --burst`` processes (pods) drain J jobs from one server;
   beside it, one process with ``--processes R`` (a pod given R cores). Wall time from the first spawn to
   the last exit, start-up included, and jobs/s over it.
2. The gauge: ``read_backlog`` on a stream of N undelivered entries whose XINFO GROUPS lag is NULL (an
   undelivered entry deleted), median of 20 reads, and the longest single command on the server
   (SLOWLOG at 0 µs) during them.

    .venv/bin/python benchmarks/scaling_bench.py [--jobs 20000] [--deep 1000000]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import OURS_ARGV, ROOT, BenchRedis, enqueue_ours, merged_probes, ours_env

from worker.observability.backlog import read_backlog
from worker.store.keys import GROUP, Keys


def drain(server: BenchRedis, kind: str, jobs: int, replicas: int, processes: int, tmp: Path) -> tuple[float, float]:
    """(wall s from the first spawn to the last exit, jobs/s from the first job's end to the last's) for
    ``replicas`` processes (each ``--processes processes``) draining ``jobs`` of ``kind``."""
    server.flush()
    server.client.xgroup_create(Keys("").jobs, GROUP, id="0", mkstream=True)
    enqueue_ours(server.client, kind, jobs)
    argv = [*OURS_ARGV, *(["--processes", str(processes)] if processes > 1 else [])]
    probe_file = tmp / f"{kind}-{replicas}-{processes}.json"
    env = ours_env(server.url, PROBE_FILE=str(probe_file), PROBE_JOBS="0", PROBE_EXIT="0", PROBE_AT_EXIT="1")
    started = time.monotonic()
    procs = [
        subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(replicas)
    ]
    for proc in procs:
        if proc.wait(600) != 0:
            raise SystemExit(f"a worker exited {proc.returncode}")
    wall = time.monotonic() - started
    probe = merged_probes(probe_file)
    if probe.get("count") != jobs:
        raise SystemExit(f"the probes saw {probe.get('count')} of {jobs} jobs")
    return wall, jobs / (probe["last"] - probe["first"])


def gauge_cost(server: BenchRedis, deep: int) -> tuple[float, float, int, bool]:
    """(median ms per read, longest command µs, backlog read, exact) on ``deep`` undelivered entries."""
    server.flush()
    keys = Keys("")
    server.client.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
    enqueue_ours(server.client, "noop", deep, chunk=5000)
    delivered = server.client.xreadgroup(GROUP, "c", {keys.jobs: ">"}, count=200)[0][1]
    server.client.xack(keys.jobs, GROUP, *[entry_id for entry_id, _ in delivered[:150]])
    last = server.client.xrevrange(keys.jobs, count=1)[0][0]
    server.client.xdel(keys.jobs, last)  # an undelivered entry deleted: XINFO GROUPS lag is NULL now
    assert server.client.xinfo_groups(keys.jobs)[0]["lag"] is None
    server.client.config_set("slowlog-log-slower-than", 0)
    server.client.config_set("slowlog-max-len", 10000)
    server.client.slowlog_reset()
    times, found = [], None
    for _ in range(20):
        started = time.perf_counter()
        (found,) = read_backlog(server.client, [keys], time.time())
        times.append((time.perf_counter() - started) * 1000)
    longest = max(int(entry["duration"]) for entry in server.client.slowlog_get(10000))
    server.client.config_set("slowlog-log-slower-than", 10000)
    assert found is not None and found.undelivered == deep - 201
    return statistics.median(times), longest, found.backlog, found.exact


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--deep", type=int, default=1_000_000)
    args = parser.parse_args()
    server = BenchRedis()
    try:
        print(f"{time.strftime('%Y-%m-%d')}, {server.version}, 2 cores, python {sys.version.split()[0]}")
        print("drain (wall: first spawn to last exit, start-up included; rate: first job's end to the last's):")
        tmp = Path(tempfile.mkdtemp(prefix="stagedoor-scaling-"))
        for kind, jobs in (("noop", args.jobs), ("sleep10", args.jobs // 4)):
            for replicas, processes in ((1, 1), (2, 1), (4, 1), (1, 2)):
                wall, rate = drain(server, kind, jobs, replicas, processes, tmp)
                shape = f"{replicas} replicas" if processes == 1 else f"1 replica, --processes {processes}"
                print(f"  {kind:8} {jobs:6} jobs  {shape:26} wall {wall:6.2f} s  {rate:8.0f} jobs/s")
        ms, longest_us, backlog, exact = gauge_cost(server, args.deep)
        print(
            f"backlog gauge on {args.deep} entries, lag NULL: {ms:.2f} ms a read (median of 20), "
            f"longest command {longest_us} µs, backlog {backlog}, exact {exact}"
        )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
