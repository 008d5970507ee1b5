"""Bounded input: a job over MAX_JOB_BYTES is refused by enqueue and, written by anyone else, dead-lettered
as ``oversized`` with each field cut to a KiB (jobs:dead and the archive stay small); metric labels take
declared kinds only; promote refuses a non-string kind; text logs escape control characters."""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import sys

import psycopg
import pytest
import redis
from prometheus_client.exposition import generate_latest

from tests.faults.helpers import KINDS
from tests.helpers import ROOT, Workers
from worker.kinds import Registry, job_kind
from worker.observability.logs import TextFormatter
from worker.observability.metrics import Metrics
from worker.settings import Settings
from worker.store.enqueue import enqueue
from worker.store.keys import Keys
from worker.store.scripts import Scripts
from worker.store.wire import CUT_FIELD, KEPT_BYTES

MIB = 1 << 20


def test_enqueue_refuses_a_job_over_max_job_bytes_in_one_line(
    r: redis.Redis, keys: Keys, workers: Workers, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match=r"^the 'fail' job is \d+ bytes, over MAX_JOB_BYTES=1048576; keep large"):
        enqueue(r, "fail", {"body": "x" * MIB}, prefix=keys.prefix)
    monkeypatch.setenv("MAX_JOB_BYTES", "100")
    with pytest.raises(ValueError, match="over MAX_JOB_BYTES=100"):
        enqueue(r, "fail", {"body": "x" * 100}, delay_s=5, prefix=keys.prefix)
    enqueue(r, "fail", {"body": "x" * 10}, prefix=keys.prefix)  # under the limit
    assert (r.xlen(keys.jobs), r.zcard(keys.delayed)) == (1, 0)  # nothing of the refused ones was written

    cli = subprocess.run(
        [sys.executable, "-m", "worker", "enqueue", "fail", "body=" + "x" * 200],
        cwd=ROOT,
        env=workers.env(KINDS),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 2
    assert cli.stderr.strip().count("\n") == 0 and "over MAX_JOB_BYTES=100" in cli.stderr


def test_the_worker_dead_letters_an_oversized_entry_cut_to_a_kib_per_field(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers, archive_url: str
) -> None:
    body = b"\x00\xff" * (10 * MIB)  # 20 MiB, written by someone other than enqueue
    r.xadd(keys.jobs, {b"kind": b"fail", b"job_id": b"big", b"note": b"kept whole", b"body": body})
    workers.burst(KINDS)
    [(_dead_id, dead)] = r.xrange(keys.dead)
    assert dead[b"reason"] == b"oversized"
    assert dead[b"job_id"] == b"big" and dead[b"note"] == b"kept whole"
    assert len(dead[b"body"]) <= 4 * KEPT_BYTES  # the first KiB, its bad bytes escaped
    cut = json.loads(dead[CUT_FIELD.encode()])
    assert cut == {"body": {"bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}}
    assert b"over MAX_JOB_BYTES=1048576" in dead[b"error"]
    dead_size = sum(len(k) + len(v) for k, v in dead.items())
    with psycopg.connect(archive_url) as conn:
        row = conn.execute(
            "SELECT reason, octet_length(fields::text) FROM dead_letters WHERE queue = %s", (prefix,)
        ).fetchone()
    assert row is not None and row[0] == "oversized"
    print(
        f"oversized entry of {len(body) + 40:,} bytes: dead entry {dead_size:,} bytes, archive fields {row[1]:,} bytes"
    )
    assert dead_size < 16 * KEPT_BYTES and row[1] < 32 * KEPT_BYTES


def test_metric_labels_take_declared_kinds_and_count_every_other_under_other(r: redis.Redis) -> None:
    registry = Registry()

    @job_kind("known", registry=registry)
    async def known(job: object) -> None: ...

    metrics = Metrics(Settings.from_env(env={"QUEUE_PREFIX": "m:"}), redis.asyncio.Redis(), registry)
    metrics.job_finished("known", "dead", 0.0, "exhausted")
    for i in range(300):
        metrics.job_finished(f"random-{i}", "dead", 0.0, "unknown_kind")
    text = generate_latest(metrics.registry).decode()
    dead = [line for line in text.splitlines() if line.startswith("worker_jobs_dead_total{")]
    assert sorted(dead) == [
        'worker_jobs_dead_total{kind="known",queue="default",reason="exhausted"} 1.0',
        'worker_jobs_dead_total{kind="other",queue="default",reason="unknown_kind"} 300.0',
    ]


@pytest.mark.parametrize("kind", ["5", "[1, 2]", '{"a": "b"}', "null", "true"])
def test_promote_refuses_a_member_whose_kind_is_not_a_string(r: redis.Redis, keys: Keys, kind: str) -> None:
    member = '{"job_id":"j","kind":' + kind + "}"
    r.zadd(keys.delayed, {member: 1})
    assert Scripts(r, keys).promote(10.0) == 1
    [(_entry_id, fields)] = r.xrange(keys.jobs)
    assert fields == {b"malformed_delayed": member.encode()}


def test_text_logs_escape_control_characters_in_fields() -> None:
    record = logging.LogRecord(
        "worker", logging.ERROR, __file__, 1, "Job %s failed: %s", ("k\n", "x\x1b[31m\u2028y"), None
    )
    line = TextFormatter("%(levelname)s %(message)s").format(record)
    assert line == "ERROR Job k\\n failed: x\\x1b[31m\\u2028y"
