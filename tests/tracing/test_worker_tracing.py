"""The worker with and without OpenTelemetry: under ``opentelemetry-instrument``, without the package at all,
and with a malformed ``traceparent`` on the wire."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from tests.helpers import ROOT, Workers, wait_for
from tests.tracing import helpers_spans as spans
from tests.tracing.test_spans import KINDS, client, one
from worker import enqueue
from worker.store.keys import Keys

BLOCKED = "import runpy, sys; sys.modules['opentelemetry'] = None; "
"""The start of a ``python -c`` that runs as if OpenTelemetry were not installed (its import fails)."""


def burst_without_otel(workers: Workers, kinds: str) -> str:
    """``python -m worker --burst`` in a process where ``import opentelemetry`` fails; its log."""
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED + "sys.argv[1:] = ['--burst']; runpy.run_module('worker', run_name='__main__')"],
        cwd=ROOT,
        env=workers.env(kinds),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_without_opentelemetry_the_worker_and_opslib_run_as_before(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers
) -> None:
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    plain = enqueue(r, "noop", {"n": 1}, prefix=prefix)
    enqueue(r, "noop", {"traceparent": traceparent}, prefix=prefix)
    enqueue(r, "fail_once_retried", {"order_id": 3}, prefix=prefix)
    assert {b"traceparent", b"tracestate"}.isdisjoint(r.xrange(keys.jobs, plain, plain)[0][1])
    log = burst_without_otel(workers, "tests.queue.kinds_basic")
    assert "Traceback" not in log
    assert r.scard(f"{prefix}test:done") == 2, log
    [(_dead_id, dead)] = r.xrange(keys.dead)
    assert dead[b"reason"] == b"exhausted" and b"trace_link" not in dead

    read = subprocess.run(
        [sys.executable, "-c", BLOCKED + "import opslib; f = opslib.dead_letters(); print(len(f), list(f['kind']))"],
        cwd=ROOT,
        env=workers.env("tests.queue.kinds_basic"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert read.returncode == 0, read.stderr
    assert read.stdout.strip() == "1 ['fail_once_retried']"


@pytest.mark.parametrize("traceparent", ["00-zz", "00-" + "0" * 32 + "-b7ad6b7169203331-01", "not a traceparent"])
def test_a_malformed_traceparent_is_ignored_and_a_new_trace_starts(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers, tmp_path: Path, traceparent: str
) -> None:
    worker_file = tmp_path / "worker.jsonl"
    enqueue(r, "traced_ok", {"traceparent": traceparent, "tracestate": "k=v"}, prefix=prefix)
    log = workers.burst(KINDS, TRACE_SPANS_FILE=str(worker_file)).stdout
    assert r.xlen(keys.dead) == 0, log
    assert "Traceback" not in log
    [span] = spans.read(worker_file)
    assert (span["name"], span["parent"], span["links"], span["status"]) == (f"process {prefix}jobs", None, [], "OK")


def test_under_opentelemetry_instrument_the_spans_name_the_enqueuers_trace(
    r: redis.Redis, prefix: str, workers: Workers, tmp_path: Path
) -> None:
    client_file = tmp_path / "client.jsonl"
    client(workers, client_file, "enqueue", "noop", "n=1")
    send = one(spans.read(client_file), f"send {prefix}jobs")
    done = subprocess.run(
        [str(Path(sys.executable).parent / "opentelemetry-instrument"), sys.executable, "-m", "worker", "--burst"],
        cwd=ROOT,
        env={
            **workers.env("tests.queue.kinds_basic"),
            "OTEL_SERVICE_NAME": "stagedoor-worker",
            "OTEL_TRACES_EXPORTER": "console",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "LOG_FORMAT": "json",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert r.scard(f"{prefix}test:done") == 1
    printed = [json.loads(text) for text in re.findall(r"^\{\n.*?^\}$", done.stdout, flags=re.M | re.S)]
    [process] = [span for span in printed if span["name"] == f"process {prefix}jobs"]
    assert process["context"]["trace_id"] == f"0x{send['trace_id']}"
    assert process["parent_id"] == f"0x{send['span_id']}"
    assert process["kind"] == "SpanKind.CONSUMER"
    assert process["resource"]["attributes"]["service.name"] == "stagedoor-worker"


def test_a_scheduled_job_continues_the_trace_its_tick_started(prefix: str, workers: Workers, tmp_path: Path) -> None:
    worker_file, tick_log = tmp_path / "worker.jsonl", tmp_path / "ticks"
    proc = workers.start("tests.tracing.kinds_scheduled", TRACE_SPANS_FILE=str(worker_file), TICK_LOG=str(tick_log))
    wait_for(lambda: tick_log.exists() and tick_log.read_text().strip(), what="a scheduled job to run")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, workers.log(proc)
    found = spans.read(worker_file)
    ticks = {span["span_id"]: span for span in found if span["name"] == f"schedule {prefix}jobs"}
    processed = [span for span in found if span["name"] == f"process {prefix}jobs"]
    assert processed and ticks
    for span in processed:
        tick = ticks[span["parent"]]
        assert (tick["kind"], tick["parent"], tick["trace_id"]) == ("PRODUCER", None, span["trace_id"])
        assert span["attributes"]["job.kind"] == "traced_tick"


def test_a_synchronous_handler_runs_inside_its_attempts_span(
    r: redis.Redis, prefix: str, workers: Workers, tmp_path: Path
) -> None:
    worker_file = tmp_path / "worker.jsonl"
    enqueue(r, "traced_sync", {}, prefix=prefix)
    log = workers.burst(KINDS, TRACE_SPANS_FILE=str(worker_file), LOG_FORMAT="json").stdout
    [span] = spans.read(worker_file)
    [line] = [json.loads(text) for text in log.splitlines() if "Sync handler ran" in text]
    assert (line["trace_id"], line["span_id"]) == (span["trace_id"], span["span_id"])


def test_a_span_that_cannot_start_leaves_the_job_to_run_untraced(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers
) -> None:
    enqueue(r, "untraced_ok", {}, prefix=prefix)
    log = workers.burst("tests.tracing.kinds_broken_tracer").stdout
    assert r.xlen(keys.dead) == 0 and r.xpending(keys.jobs, "workers")["pending"] == 0, log
    assert "Could not start the span of entry" in log and "the sampler is broken" in log
