"""``LOG_FORMAT=json``: every line a worker writes is one JSON object, and job lines carry the job's facts."""

from __future__ import annotations

import json

import redis

from tests.helpers import Workers
from worker.store.enqueue import enqueue

KINDS = "tests.deploy.kinds_metrics"
JOB_FIELDS = {"kind", "job_id", "attempt", "outcome", "duration_ms", "request_id", "trace"}


def test_json_lines_carry_kind_job_id_attempt_outcome_duration_request_id_and_trace(
    r: redis.Redis, prefix: str, workers: Workers
) -> None:
    for kind in ("ok", "flaky", "boom"):
        enqueue(r, kind, {"request_id": f"req-{kind}", "trace": f"trace-{kind}"}, prefix=prefix)
    out = workers.burst(KINDS, LOG_FORMAT="json", LOG_LEVEL="DEBUG").stdout

    records = []
    for line in out.splitlines():
        record = json.loads(line)  # every line, not only the job lines
        assert isinstance(record, dict) and {"time", "level", "logger", "message"} <= record.keys(), line
        records.append(record)
    by_outcome = {(rec["kind"], rec["outcome"]): rec for rec in records if "job_id" in rec}
    expected = {
        ("ok", "succeeded"): ("DEBUG", 1),
        ("flaky", "retried"): ("WARNING", 1),
        ("flaky", "succeeded"): ("DEBUG", 2),
        ("boom", "dead"): ("ERROR", 1),
    }
    for (kind, outcome), (level, attempt) in expected.items():
        rec = by_outcome[(kind, outcome)]
        assert rec.keys() >= JOB_FIELDS, rec
        assert rec["level"] == level
        assert rec["attempt"] == attempt
        assert rec["request_id"] == f"req-{kind}" and rec["trace"] == f"trace-{kind}"
        assert isinstance(rec["duration_ms"], int | float) and rec["duration_ms"] >= 0
    assert by_outcome[("boom", "dead")]["reason"] == "exhausted"
    assert "ValueError: order ? cannot be rendered" in by_outcome[("boom", "dead")]["message"]
