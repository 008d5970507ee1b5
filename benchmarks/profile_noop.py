"""Where one worker process spends its CPU on no-op jobs: cProfile's top entries and a py-spy flame graph.

    .venv/bin/python benchmarks/profile_noop.py [--jobs 20000] [--top 30] [--no-flame]

Enqueues ``--jobs`` no-op jobs on a server of its own, then runs
``python -m worker --burst`` on them twice: once under cProfile (the top
entries by own time, and by cumulative time, go to
``benchmarks/results/profile-<stamp>.txt``), and once under py-spy (a
sampling profiler: the flame graph goes to ``profile-<stamp>.svg``). py-spy is
a benchmark-only dependency (``benchmarks/requirements/profile.txt``, installed
into ``benchmarks/.venv/profile`` by ``make profile``); without it the flame
graph is skipped. cProfile slows every call down, so its figures say where the
time goes, not how much there is: ``throughput.py`` measures that.
"""

from __future__ import annotations

import argparse
import pstats
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from benchlib import BENCH_DIR, OURS_ARGV, BenchError, BenchRedis, enqueue_ours, ours_env, run_worker

RESULTS = BENCH_DIR / "results"
PY_SPY = BENCH_DIR / ".venv" / "profile" / "bin" / "py-spy"


def profiled_run(server: BenchRedis, jobs: int, argv: list[str], log: Path) -> None:
    server.flush()
    enqueue_ours(server.client, "noop", jobs)
    env = ours_env(server.url)
    run_worker(argv, env=env, jobs=jobs, server=server, timeout_s=300, log_path=log, exit_at_target=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--top", type=int, default=30, help="entries of each table (default 30)")
    parser.add_argument("--no-flame", action="store_true", help="cProfile only")
    args = parser.parse_args()

    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    stats_file = RESULTS / f"profile-{stamp}.pstats"
    report = RESULTS / f"profile-{stamp}.txt"
    server = BenchRedis()
    try:
        profiled_run(server, 100, list(OURS_ARGV), RESULTS / f"profile-{stamp}-warmup.log")  # bytecode caches
        python, _m, module, *rest = OURS_ARGV
        profiled_run(
            server,
            args.jobs,
            [python, "-m", "cProfile", "-o", str(stats_file), "-m", module, *rest],
            RESULTS / f"profile-{stamp}-cprofile.log",
        )
        with open(report, "w") as out:
            out.write(f"cProfile of python -m worker --burst on {args.jobs} no-op jobs, {stamp} UTC\n\n")
            for order in ("tottime", "cumulative"):
                out.write(f"== top {args.top} by {order} ==\n")
                pstats.Stats(str(stats_file), stream=out).sort_stats(order).print_stats(args.top)
        print(f"cProfile: {report}")
        if not args.no_flame:
            if not PY_SPY.exists():
                print(f"no flame graph: py-spy is not installed ({PY_SPY}); `make profile` installs it")
                return
            flame = RESULTS / f"profile-{stamp}.svg"
            profiled_run(
                server,
                args.jobs,
                [str(PY_SPY), "record", "--rate", "2000", "--nonblocking", "-o", str(flame), "--", *OURS_ARGV],
                RESULTS / f"profile-{stamp}-py-spy.log",
            )
            print(f"flame graph: {flame}")
    finally:
        server.stop()


if __name__ == "__main__":
    try:
        main()
    except (BenchError, subprocess.SubprocessError) as exc:
        sys.exit(f"profile failed: {exc}")
