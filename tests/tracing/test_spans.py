"""The spans of one job across processes: enqueued inside a request's span, failing once, retried,
dead-lettered, replayed inside an analyst's span, then succeeding (docs/operations.md, "Tracing")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import redis

import opslib
from tests.helpers import ROOT, Workers, wait_for
from tests.tracing import helpers_spans as spans
from worker.store.keys import Keys
from worker.store.trace_context import trace_ids

KINDS = "tests.tracing.kinds_traced"


def client(workers: Workers, spans_file: Path, *args: str) -> str:
    """Run the enqueuer's process (:mod:`tests.tracing.helpers_client`); what it printed."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.tracing.helpers_client", str(spans_file), *args],
        cwd=ROOT,
        env=workers.env(KINDS),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def one(found: list[dict[str, Any]], name: str) -> dict[str, Any]:
    named = [span for span in found if span["name"] == name]
    assert len(named) == 1, f"expected one span {name!r}, got {[s['name'] for s in found]}"
    return named[0]


def test_request_retry_dead_letter_replay_success(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers, tmp_path: Path
) -> None:
    client_file, worker_file = tmp_path / "client.jsonl", tmp_path / "worker.jsonl"
    client(workers, client_file, "enqueue", "fixed_by_replay", "order_id=7")
    log = workers.burst(KINDS, TRACE_SPANS_FILE=str(worker_file), LOG_FORMAT="json").stdout
    [(dead_id, dead)] = r.xrange(keys.dead)
    dead_letters = opslib.dead_letters(client=r, prefix=prefix)
    wait_for(lambda: len(opslib.archive(prefix=prefix)), what="the archive's row")
    archived = opslib.archive(prefix=prefix)
    client(workers, client_file, "replay", dead_id.decode())
    workers.burst(KINDS, TRACE_SPANS_FILE=str(worker_file))

    enqueuer = spans.read(client_file)
    assert sorted(span["name"] for span in enqueuer) == sorted(
        ["checkout", f"send {prefix}jobs", "fix", f"replay {prefix}jobs"]
    )
    checkout, send = one(enqueuer, "checkout"), one(enqueuer, f"send {prefix}jobs")
    fix, replay = one(enqueuer, "fix"), one(enqueuer, f"replay {prefix}jobs")
    assert (send["kind"], send["trace_id"], send["parent"]) == ("PRODUCER", checkout["trace_id"], checkout["span_id"])
    assert (replay["kind"], replay["trace_id"], replay["parent"]) == ("PRODUCER", fix["trace_id"], fix["span_id"])

    worked = spans.read(worker_file)
    assert [span["name"] for span in worked] == [f"process {prefix}jobs"] * 3
    first, second, replayed = worked  # in the order they ended: the two runs append to one file
    for span in worked:
        assert span["kind"] == "CONSUMER"
        assert span["attributes"]["messaging.system"] == "redis_streams"
        assert span["attributes"]["messaging.destination.name"] == f"{prefix}jobs"
        assert span["attributes"]["job.kind"] == "fixed_by_replay"

    # The first attempt is a child of the enqueuer's send span, in the request's trace.
    assert (first["trace_id"], first["parent"], first["links"]) == (checkout["trace_id"], send["span_id"], [])
    assert first["status"] == "ERROR"
    assert [event["name"] for event in first["events"]] == ["exception"]
    assert first["attributes"]["job.outcome"] == "retried"

    # The retry starts a trace of its own, linked to the first attempt; it dead-letters the job.
    assert second["parent"] is None and second["trace_id"] not in (checkout["trace_id"], first["trace_id"])
    assert second["links"] == [[first["trace_id"], first["span_id"]]]
    assert [event["name"] for event in second["events"]] == ["exception", "dead_letter"]
    dead_event = second["events"][1]
    assert dead_event["job.dead.reason"] == "exhausted"
    assert dead_event["job.dead.id"] == dead_id.decode()
    assert "failed on purpose" in dead_event["exception.message"]
    assert second["status"] == "ERROR"

    # The dead letter keeps the request's context and names its last attempt.
    assert trace_ids(dead[b"traceparent"].decode()) == (checkout["trace_id"], send["span_id"])
    assert trace_ids(dead[b"trace_link"].decode()) == (second["trace_id"], second["span_id"])

    # dead_letters() and the archive name the request's trace (and the span that sent the job).
    for frame in (dead_letters, archived):
        assert (frame.index[0], frame.trace_id.iat[0], frame.span_id.iat[0]) == (
            dead_id.decode(),
            checkout["trace_id"],
            send["span_id"],
        )
        assert not {"traceparent", "tracestate", "trace_link"} & set(frame.columns)

    # The replay links the dead letter's last attempt; the replayed attempt links the replay.
    assert replay["links"] == [[second["trace_id"], second["span_id"]]]
    assert replayed["parent"] is None and replayed["trace_id"] not in (fix["trace_id"], second["trace_id"])
    assert replayed["links"] == [[replay["trace_id"], replay["span_id"]]]
    assert (replayed["status"], replayed["events"]) == ("OK", [])

    # The JSON log lines of an attempt carry its trace: the handler's own, and the worker's.
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    running = [line for line in lines if line["message"].startswith("Running")]
    assert [(line["trace_id"], line["span_id"]) for line in running] == [
        (first["trace_id"], first["span_id"]),
        (second["trace_id"], second["span_id"]),
    ]
    [retrying] = [line for line in lines if line.get("outcome") == "retried"]
    [buried] = [line for line in lines if line.get("outcome") == "dead"]
    assert (retrying["trace_id"], buried["trace_id"]) == (first["trace_id"], second["trace_id"])


def test_a_replay_from_the_archive_links_the_dead_letter_and_passes_its_context_on(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers, tmp_path: Path
) -> None:
    """The stream was trimmed of the dead letter (as the archiver's trim does once it is archived): the
    replay re-adds it from the archive, links its last attempt and writes the replay's context."""
    client_file, worker_file = tmp_path / "client.jsonl", tmp_path / "worker.jsonl"
    client(workers, client_file, "enqueue", "fixed_by_replay", "order_id=8")
    workers.burst(KINDS, TRACE_SPANS_FILE=str(worker_file))
    [(dead_id, _dead)] = r.xrange(keys.dead)
    wait_for(lambda: len(opslib.archive(prefix=prefix)), what="the archive's row")
    r.xdel(keys.dead, dead_id)
    new_id = client(workers, client_file, "replay", dead_id.decode())
    assert new_id and r.xlen(keys.dead) == 0
    workers.burst(KINDS, TRACE_SPANS_FILE=str(worker_file))
    _first, second, replayed = spans.read(worker_file)
    replay = one(spans.read(client_file), f"replay {prefix}jobs")
    assert replay["links"] == [[second["trace_id"], second["span_id"]]]
    assert replayed["parent"] is None and replayed["links"] == [[replay["trace_id"], replay["span_id"]]]
    assert replayed["status"] == "OK"
