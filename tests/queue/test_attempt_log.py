"""Lineage: a dead letter keeps the errors of its attempts (``attempt_log``), real workers and servers.

The log is written by each retry, completed by the burial, kept by the
archive, printed by ``show()`` and the panel, bounded to the last 10, and
started afresh by a replay (the attempts before it are on ``replay_of``).
"""

from __future__ import annotations

import json

import pandas as pd
import psycopg
import pytest
import redis

import opslib
from opslib.panel.html import entry_html
from tests.helpers import Workers
from worker.archive.table import migrate_url
from worker.store import attempt_log, wire
from worker.store.enqueue import enqueue
from worker.store.keys import Keys
from worker.store.versions import stamped

KINDS = "tests.queue.kinds_basic"


def dead_fields(r: redis.Redis, keys: Keys) -> dict[str, dict[str, str]]:
    return {e.decode(): {k.decode(): v.decode() for k, v in f.items()} for e, f in r.xrange(keys.dead)}


def archived_log(archive_url: str, prefix: str, dead_id: str) -> list[dict[str, object]]:
    with psycopg.connect(archive_url) as conn:
        row = conn.execute(
            "SELECT attempt_log FROM dead_letters WHERE queue = %s AND dead_id = %s", (prefix, dead_id)
        ).fetchone()
    assert row is not None, f"{dead_id} is not in the archive"
    return row[0]


def attempts_of(shown: opslib.DeadLetter) -> list[tuple[str, str]]:
    [attempts] = [rows for title, rows in shown.sections() if title.startswith("Attempts")]
    return attempts


def test_a_job_that_failed_twice_then_died_shows_its_three_attempts_in_order_everywhere(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers, archive_url: str
) -> None:
    migrate_url(archive_url)
    enqueue(r, "fail_twice_then_dead", {"order_id": "4471"}, prefix=prefix)
    workers.here(KINDS)
    [(dead_id, dead)] = dead_fields(r, keys).items()
    errors = ["ValueError: attempt 1 failed", "ValueError: attempt 2 failed", "ValueError: attempt 3 failed"]
    logged = attempt_log.parse(dead["attempt_log"])
    assert [item["error"] for item in logged] == errors
    assert all(item["worker"] == dead["worker"] and float(item["duration_s"]) >= 0 for item in logged)
    times = [pd.Timestamp(item["at"]) for item in logged]
    assert times == sorted(times) and times[-1] <= pd.Timestamp(dead["failed_at"])
    assert dead["error"] == errors[-1] and dead["attempts"] == "3"

    assert [item["error"] for item in archived_log(archive_url, prefix, dead_id)] == errors
    row = opslib.archive("fail_twice_then_dead", conn=archive_url, client=r, prefix=prefix).loc[dead_id]
    assert attempt_log.parse(row["attempt_log"]) == logged
    frame = opslib.dead_letters("fail_twice_then_dead", client=r, prefix=prefix)
    assert attempt_log.parse(frame.loc[dead_id, "attempt_log"]) == logged

    shown = opslib.show(dead_id, conn=archive_url, client=r, prefix=prefix)
    sections = dict(shown.sections())
    assert "attempt_log" not in dict(sections["Payload"])  # shown as attempts, not as a payload field
    attempts = attempts_of(shown)
    assert [label for label, _ in attempts] == ["attempt 1", "attempt 2", "attempt 3"]
    assert [line.rsplit(" · ", 1)[1] for _, line in attempts] == errors
    frame = shown.attempts
    assert list(frame["attempt"]) == [1, 2, 3] and list(frame["error"]) == errors
    assert list(frame["at"]) == times and set(frame["worker"]) == {dead["worker"]}
    assert str(frame["at"].dtype) == "datetime64[ns, UTC]" and str(frame["duration"].dtype) == "timedelta64[ns]"
    text = str(shown)
    listed = text[text.index("\nAttempts") :]
    assert listed.index("attempt 1 failed") < listed.index("attempt 2 failed") < listed.index("attempt 3 failed")


def test_the_log_keeps_the_last_ten_attempts_of_a_job_retried_fifteen_times(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers
) -> None:
    enqueue(r, "fail_fifteen_retries", {"order_id": "4471"}, prefix=prefix)
    workers.here(KINDS)
    [dead] = dead_fields(r, keys).values()
    assert dead["attempts"] == "16"
    logged = attempt_log.parse(dead["attempt_log"])
    assert [item["error"] for item in logged] == [f"ValueError: attempt {n} failed" for n in range(7, 17)]
    [dead_id] = dead_fields(r, keys)
    labels = [label for label, _ in attempts_of(opslib.show(dead_id, archive=False, client=r, prefix=prefix))]
    assert labels == [f"attempt {n}" for n in range(7, 17)]


def test_a_replayed_job_that_dies_again_starts_a_fresh_log_and_links_replay_of(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers, archive_url: str
) -> None:
    migrate_url(archive_url)
    enqueue(r, "fail_twice_then_dead", {"order_id": "4471"}, prefix=prefix)
    workers.here(KINDS)
    [first] = dead_fields(r, keys)
    new_id = opslib.replay(first, client=r, prefix=prefix)["new_id"].iloc[0]
    replayed = {k.decode(): v.decode() for k, v in r.xrange(keys.jobs, new_id, new_id)[0][1].items()}
    assert "attempt_log" not in replayed and replayed["attempts"] == "0"
    workers.here(KINDS)
    [(again, dead)] = dead_fields(r, keys).items()
    assert (dead["replay_of"], dead["replays"]) == (first, "1")
    errors = [item["error"] for item in attempt_log.parse(dead["attempt_log"])]
    assert errors == ["ValueError: attempt 4 failed", "ValueError: attempt 5 failed", "ValueError: attempt 6 failed"]
    shown = opslib.show(again, conn=archive_url, client=r, prefix=prefix)
    assert shown.chain == [(first, "ValueError: attempt 3 failed")]
    assert [label for label, _ in attempts_of(shown)] == ["attempt 1", "attempt 2", "attempt 3"]
    earlier = opslib.show(first, conn=archive_url, client=r, prefix=prefix)
    assert "attempt 1 failed" in str(earlier) and "attempt 4" not in str(earlier)


def test_an_error_with_html_is_escaped_in_shows_html_and_in_the_panel(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers
) -> None:
    note = "<script>alert('seat')</script> & <b>more</b>"
    enqueue(r, "fail_twice_then_dead", {"order_id": "4471", "note": note}, prefix=prefix)
    workers.here(KINDS)
    [dead_id] = dead_fields(r, keys)
    page = opslib.show(dead_id, archive=False, client=r, prefix=prefix)._repr_html_()
    panel = entry_html(dead_id, opslib.dead_letters(client=r, prefix=prefix).loc[dead_id])
    for shown in (page, panel):
        assert "<script>" not in shown and "<b>more" not in shown
        for n in (1, 2, 3):
            assert f"attempt {n} failed &lt;script&gt;alert(&#x27;seat&#x27;)&lt;/script&gt; &amp; &lt;b&gt;" in shown


def test_a_log_is_bounded_in_length_and_reads_what_is_not_a_log_as_none() -> None:
    log = None
    for n in range(12):
        log = attempt_log.appended(log, at=f"2026-12-01T17:00:{n:02d}Z", duration_s=0.5, worker="w", error="E" * 900)
    parsed = attempt_log.parse(log)
    assert len(parsed) == attempt_log.KEPT_ATTEMPTS and parsed[0]["at"] == "2026-12-01T17:00:02Z"
    assert all(len(item["error"]) == attempt_log.ERROR_CHARS for item in parsed)
    assert json.loads(log) == parsed
    assert [attempt_log.parse(bad) for bad in ("", "not json", '{"a": 1}', "[1, 2]")] == [[], [], [], []]


def test_the_field_stays_under_its_byte_bound_however_long_the_errors_and_names() -> None:
    """Escaped control characters (6 bytes each in JSON) and a very long worker name: the oldest attempts
    go, the latest stays, and the field never takes a job more than ``attempt_log.ROOM`` past its size."""
    field = None
    for n in range(40):
        error = f"E{n}:" + "\x01" * 2000
        field = attempt_log.appended(
            field, at="2026-12-01T00:00:00+00:00", duration_s=1.5, worker="w" * 5000, error=error
        )
        assert len(field.encode()) <= attempt_log.MAX_BYTES
    logged = attempt_log.parse(field)
    assert logged[-1]["error"].startswith("E39:") and 1 <= len(logged) < attempt_log.KEPT_ATTEMPTS
    assert all(len(item["worker"]) == attempt_log.WORKER_CHARS for item in logged)


def test_a_job_enqueued_just_under_max_job_bytes_still_retries_until_its_policy_says_dead(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each retry adds its attempt to the job; the worker leaves room for that, so a job at the limit is
    retried to exhaustion, not dead-lettered as oversized on its second delivery."""
    limit = 4096
    monkeypatch.setenv("MAX_JOB_BYTES", str(limit))
    # As enqueue writes it: with the kind's version (``v``) when this process has registered the kind.
    base = stamped({"kind": "fail_fifteen_retries", "job_id": "at-the-limit", "attempts": "0", "order_id": ""}, None)
    fields = {"job_id": "at-the-limit", "order_id": "x" * (limit - wire.job_bytes(base))}
    enqueue(r, "fail_fifteen_retries", fields, prefix=prefix)
    [(_id, entry)] = r.xrange(keys.jobs)
    assert wire.job_bytes({k.decode(): v.decode() for k, v in entry.items()}) == limit
    workers.here(KINDS, MAX_JOB_BYTES=str(limit))
    [dead] = dead_fields(r, keys).values()
    assert (dead["reason"], dead["attempts"]) == ("exhausted", "16"), dead["error"]
    assert len(attempt_log.parse(dead["attempt_log"])) == attempt_log.KEPT_ATTEMPTS
