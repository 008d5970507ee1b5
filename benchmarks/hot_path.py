"""The worker's own cost per job, without Redis: start a slot, parse the entry, run a no-op handler, record
the success.

    .venv/bin/python benchmarks/hot_path.py [--jobs 200000] [--runs 5] [--metrics] [--flow] [--flow-cost]
        [--tracing MODE]

Hands batches of 8 prebuilt entries (the fields ``enqueue`` writes) to
:meth:`Slots.start` as the read loop does, and lets the slots finish before
the next batch, on uvloop; the acknowledgements gathered are dropped, never
sent. What a job costs here is what the loop pays for it in CPU beyond the
read and the acknowledgement's round trip: the figure to cut when tuning
:meth:`Executor.run`, the parse, the observers and the outcome's bookkeeping.
``--metrics`` adds the metrics observer (``METRICS_PORT`` set), ``--flow`` the
flow counters' (on unless ``FLOW_RETENTION=0``). ``--flow-cost`` runs without
and with the flow counters in turn (``make bench`` does) and prints both and
their difference: what the counters cost a job on the loop's path (their
flush, once a second, is off this path).

``--tracing`` picks what OpenTelemetry the process has: ``off`` (none),
``api`` (the API imported, no SDK: the worker must not trace), ``sdk`` (an
SDK tracer provider with no exporter: a span per job, exported to nothing).
``--tracing compare`` (what ``make bench`` runs) runs the three side by side,
each in a process of its own, rounds interleaved, and prints what tracing
adds to a job (best runs compared: on a shared machine the slower runs
measure the neighbours too). Its ``off`` process has OpenTelemetry blocked
from import, as an install without the ``otel`` extra: redis-py imports it
whenever it is installed, so in this venv a plain run always has the API
loaded.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
import uuid

import redis.asyncio as aioredis
import uvloop

from worker.kinds import Job, Registry, job_kind
from worker.loop.runner import Worker
from worker.observability.flow import FlowCounter
from worker.observability.metrics import JobCollector
from worker.settings import Settings
from worker.store.keys import Keys

BATCH = 8
MODES = ("off", "api", "sdk")


async def noop(job: Job) -> None:
    """The benchmark's handler: nothing to do."""


def entries(count: int) -> list[tuple[str, dict[bytes, bytes]]]:
    now_ms = int(time.time() * 1000)
    return [
        (f"{now_ms}-{i}", {b"kind": b"noop", b"job_id": uuid.uuid4().hex.encode(), b"attempts": b"0"})
        for i in range(count)
    ]


async def one_run(jobs: int, metrics: bool, flow: bool = False, tracing: bool = False) -> float:
    registry = Registry()
    job_kind("noop", registry=registry)(noop)
    settings = Settings.from_env({"WORKER_NAME": "hot-path", "ARCHIVE_URL": "off"})
    client = aioredis.Redis()  # never connects
    observers: list[JobCollector | FlowCounter] = [JobCollector("bench")] if metrics else []
    if flow:
        observers.append(FlowCounter(client, Keys(), registry.kinds, retention_days=8))
    worker = Worker(client, settings, registry, observers=observers)
    assert worker.traced is tracing, "the worker should trace with an SDK, and only then"
    part, slots = worker.parts[0], worker.slots
    todo = entries(jobs)
    started = time.perf_counter()
    for low in range(0, jobs, BATCH):
        for entry_id, raw in todo[low : low + BATCH]:
            slots.start(part, entry_id, raw)
        while slots.inflight:
            await asyncio.sleep(0)
        part.outcomes.take_acks()
    elapsed = time.perf_counter() - started
    await worker.redis.aclose()
    return elapsed / jobs * 1e6


def observer_cost(jobs: int) -> float:
    """The flow counters' two calls a job (``job_started`` and ``job_finished``) alone, in µs a job."""
    counter = FlowCounter(None, Keys(), ["noop"], retention_days=8)
    started, finished = counter.job_started, counter.job_finished
    begin = time.perf_counter()
    for n in range(jobs):
        started("noop", 0.003)
        finished("noop", "succeeded", 0.0001 * (n & 7), None)
    return (time.perf_counter() - begin) / jobs * 1e6


def flow_cost(jobs: int, runs: int, metrics: bool) -> None:
    """Runs without and with the flow counters in turn (so both see the same machine load); prints both,
    and the counters' calls alone."""
    off: list[float] = []
    on: list[float] = []
    for _ in range(runs):
        off.append(uvloop.run(one_run(jobs, metrics, flow=False)))
        on.append(uvloop.run(one_run(jobs, metrics, flow=True)))
    alone = [observer_cost(jobs) for _ in range(runs)]
    print(
        f"{jobs:,} no-op jobs in batches of {BATCH}, no Redis, {runs} runs each: flow counters off "
        f"{statistics.median(off):.2f} µs a job (min {min(off):.2f}), on {statistics.median(on):.2f} µs "
        f"(min {min(on):.2f}); the counters' two calls alone {statistics.median(alone):.2f} µs a job "
        f"(min {min(alone):.2f})"
    )


def set_up_tracing(mode: str) -> None:
    """Give this process the OpenTelemetry of ``mode`` (module docstring)."""
    if mode == "api":
        import opentelemetry.trace  # noqa: F401
    elif mode == "sdk":
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider

        trace.set_tracer_provider(TracerProvider())


_WITHOUT_OTEL = (
    "import runpy, sys; sys.modules['opentelemetry'] = None; sys.argv = sys.argv[1:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)
"""Runs this script with ``import opentelemetry`` failing, as where the package is not installed."""


def tracing_cost(jobs: int, runs: int) -> None:
    """The three tracing modes side by side, one process per run, rounds interleaved."""
    figures: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(runs):
        for mode in MODES:
            args = [__file__, "--jobs", str(jobs), "--runs", "1", "--tracing", mode, "--figure"]
            argv = [sys.executable, "-c", _WITHOUT_OTEL, *args] if mode == "off" else [sys.executable, *args]
            figures[mode].append(float(subprocess.run(argv, check=True, capture_output=True, text=True).stdout))
    # The best run is the figure: on a shared machine the others measure the neighbours as well.
    off = min(figures["off"])
    print(f"{jobs:,} no-op jobs in batches of {BATCH}, no Redis, {runs} runs each, µs a job: best (median, worst)")
    for mode, label in zip(MODES, ("tracing off", "API, no SDK", "SDK, no exporter"), strict=True):
        best = min(figures[mode])
        print(
            f"  {label:<17} {best:6.2f} ({statistics.median(figures[mode]):.2f}, {max(figures[mode]):.2f})"
            f"  {best - off:+.2f} against off"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--metrics", action="store_true", help="with the metrics observer (METRICS_PORT set)")
    parser.add_argument("--flow", action="store_true", help="with the flow counters' observer")
    parser.add_argument("--flow-cost", action="store_true", help="without and with the flow counters, side by side")
    parser.add_argument("--tracing", choices=[*MODES, "compare"], default="off")
    parser.add_argument("--figure", action="store_true", help="print the median µs a job alone (for compare)")
    args = parser.parse_args()
    if args.flow_cost:
        flow_cost(args.jobs, args.runs, args.metrics)
        return
    if args.tracing == "compare":
        tracing_cost(args.jobs, args.runs)
        return
    set_up_tracing(args.tracing)
    traced = args.tracing == "sdk"
    figures = [uvloop.run(one_run(args.jobs, args.metrics, args.flow, traced)) for _ in range(args.runs)]
    if args.figure:
        print(f"{statistics.median(figures):.4f}")
        return
    print(
        f"{args.jobs:,} no-op jobs in batches of {BATCH}, no Redis, tracing {args.tracing}: "
        f"{statistics.median(figures):.2f} µs a job (median of {args.runs}; min {min(figures):.2f}, "
        f"max {max(figures):.2f})"
    )


if __name__ == "__main__":
    main()
