"""The read functions against a real server: empty and filled queues, filters, clear errors."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pandas as pd
import psycopg
import pytest
import redis

import opslib
from benchmarks.fixtures import ensure_group
from opslib.connection import QUICK_RETRY
from opslib.frames import CONSUMER_COLUMNS, DEAD_COLUMNS, DELAYED_COLUMNS, PENDING_COLUMNS, PENDING_COUNT_COLUMNS
from opslib.signatures import GROUP_COLUMNS
from tests.helpers import Workers
from tests.opslib.helpers import bury, seat_dead_letters
from worker.embedded.servers import free_port
from worker.store.dev_stack import STACK_FILE
from worker.store.enqueue import enqueue
from worker.store.keys import GROUP, Keys


def dtypes(frame: pd.DataFrame) -> dict[str, str]:
    return frame.dtypes.astype(str).to_dict()


def test_every_query_on_an_empty_queue_has_its_columns(at: dict[str, Any]) -> None:
    assert dtypes(opslib.dead_letters(**at)) == DEAD_COLUMNS
    assert dtypes(opslib.pending(**at)) == PENDING_COLUMNS
    assert dtypes(opslib.pending_counts(**at)) == PENDING_COUNT_COLUMNS
    assert dtypes(opslib.delayed(**at)) == DELAYED_COLUMNS
    assert dtypes(opslib.failure_groups(**at)) == GROUP_COLUMNS
    stats = opslib.queue_stats(**at)
    assert stats.counts["value"].to_dict() == dict.fromkeys(
        [
            "stream_length",
            "lag",
            "oldest_waiting_s",
            "pending",
            "pending_idle",
            "delayed",
            "delayed_due",
            "dead",
            "dead_evicted",
            "consumers",
            "consumers_live",
            "paused_kinds",
            "oldest_pause_s",
            "parked",
            "throttled",
            "fair",
        ],
        0,
    )
    assert str(stats.counts["value"].dtype) == "int64"
    assert dtypes(stats.consumers) == CONSUMER_COLUMNS
    assert dtypes(stats.paused) == {"since": "datetime64[ns, UTC]", "by": "str", "reason": "str"}


def test_queries_on_a_queue_that_real_workers_filled(
    r: redis.Redis, keys: Keys, workers: Workers, at: dict[str, Any]
) -> None:
    started = pd.Timestamp.now(tz="UTC").floor("ms")
    dead_ids = seat_dead_letters(r, keys, workers)
    # a job a crashed worker left pending, one retry due now, one job for tomorrow, one undelivered job
    ensure_group(r, keys)
    stuck = enqueue(r, "seat_label", {"seat": "1A", "job_id": "stuck"}, prefix=keys.prefix)
    r.xreadgroup(GROUP, "crashed-worker", {keys.jobs: ">"}, count=1)
    enqueue(r, "seat_label", {"seat": "2A", "job_id": "due"}, run_at=time.time() - 5, prefix=keys.prefix)
    enqueue(r, "mailer", {"email": "a@example.org", "job_id": "later"}, delay_s=86_400, prefix=keys.prefix)
    enqueue(r, "seat_label", {"seat": "3A", "job_id": "waiting"}, prefix=keys.prefix)

    dead = opslib.dead_letters(**at)
    assert list(dead.index) == dead_ids
    assert list(dead.columns) == [*DEAD_COLUMNS, "order_id", "seat"]
    assert dtypes(dead) == {**DEAD_COLUMNS, "order_id": "str", "seat": "str"}
    assert sorted(dead["seat"]) == ["14-C", "3-B", "7-A"]
    assert set(dead["attempts"]) == {2}
    assert set(dead["reason"]) == {"exhausted"}
    assert set(dead["error_type"]) == {"SeatLabelInvalid"}
    assert (
        dead.set_index("seat").loc["14-C", "error"] == "SeatLabelInvalid: '14-C' is not a row letter and a seat number"
    )
    assert dead["traceback"].str.contains("SeatLabelInvalid").all()
    assert (dead["dead_at"] >= started).all() and (dead["worker"] != "").all()

    groups = opslib.failure_groups(**at)
    assert len(groups) == 1
    assert groups.iloc[0][["signature", "kinds", "count", "example_id"]].tolist() == [
        "SeatLabelInvalid: <str> is not a row letter and a seat number",
        "seat_label",
        3,
        dead_ids[-1],
    ]

    waiting = opslib.pending(**at)
    assert list(waiting.index) == [stuck]
    assert waiting.loc[stuck, ["kind", "job_id", "consumer", "deliveries"]].tolist() == [
        "seat_label",
        "stuck",
        "crashed-worker",
        1,
    ]
    counts = opslib.pending_counts(reclaim_idle_ms=1, **at)
    assert counts[["consumer", "kind", "pending", "beyond_reclaim"]].values.tolist() == [
        ["crashed-worker", "seat_label", 1, 1]
    ]
    assert opslib.pending_counts(reclaim_idle_ms=3_600_000, **at)["beyond_reclaim"].tolist() == [0]

    later = opslib.delayed(**at)
    assert later[["kind", "job_id", "attempts", "due"]].values.tolist() == [
        ["seat_label", "due", 0, True],
        ["mailer", "later", 0, False],
    ]
    assert later["fields"][1]["email"] == "a@example.org"
    assert opslib.delayed("mailer", **at)["job_id"].tolist() == ["later"]

    stats = opslib.queue_stats(**at)
    values = stats.counts["value"].to_dict()
    assert 0 <= values.pop("oldest_waiting_s") < 60  # the undelivered entry was added just now
    assert values == {
        "stream_length": r.xlen(keys.jobs),  # acknowledged entries stay until the worker's trim chore
        "lag": 1,
        "pending": 1,
        "pending_idle": 0,  # the crashed worker's entry is not idle beyond RECLAIM_IDLE_MS yet
        "delayed": 2,
        "delayed_due": 1,
        "dead": 3,
        "dead_evicted": 0,
        "consumers": 2,
        "consumers_live": 0,  # the burst worker deleted its heartbeat on its way out
        "paused_kinds": 0,
        "oldest_pause_s": 0,
        "parked": 0,
        "throttled": 0,
        "fair": 0,  # no job waits for its fair key's turn
    }
    assert stats.dead == 3
    assert "crashed-worker" in set(stats.consumers["consumer"])
    assert not stats.consumers.set_index("consumer").loc["crashed-worker", "heartbeat"]
    assert "<table" in stats._repr_html_()


def test_dead_letters_filters(r: redis.Redis, keys: Keys, at: dict[str, Any]) -> None:
    job = {"kind": "seat_label", "attempts": "0", "seat": "1-A"}
    first = bury(r, keys, job, {"attempts": "2", "error": "SeatLabelInvalid: '1-A' is bad", "reason": "exhausted"})
    time.sleep(0.002)  # the next entry id must have a later millisecond than the first
    middle = pd.Timestamp.now(tz="UTC")
    second = bury(r, keys, {**job, "kind": "mailer"}, {"error": "ConnectionError: 503", "reason": "exhausted"})
    third = bury(r, keys, {**job, "seat": "2-B"}, {"error": "SeatLabelInvalid: '2-B' is bad", "reason": "exhausted"})
    assert list(opslib.dead_letters("seat_label", **at).index) == [first, third]
    assert list(opslib.dead_letters(since=middle, **at).index) == [second, third]
    assert list(opslib.dead_letters(since=middle.isoformat(), **at).index) == [second, third]
    assert list(opslib.dead_letters(since=pd.Timedelta("1h"), **at).index) == [first, second, third]
    assert list(opslib.dead_letters(signature="SeatLabelInvalid: <str> is bad", **at).index) == [first, third]
    assert list(opslib.dead_letters(limit=2, **at).index) == [second, third]
    assert list(opslib.dead_letters("seat_label", limit=1, **at).index) == [third]
    assert "email" not in opslib.dead_letters("seat_label", **at).columns


def test_a_kind_is_known_by_what_the_queue_holds_anywhere(r: redis.Redis, keys: Keys, at: dict[str, Any]) -> None:
    bury(r, keys, {"kind": "seat_label", "seat": "1-A"}, {"error": "SeatLabelInvalid: '1-A' is bad"})
    r.zadd(keys.delayed, {json.dumps({"kind": "mailer", "job_id": "7", "attempts": "1"}): 4_000_000_000})
    assert opslib.pending("seat_label", **at).empty
    assert opslib.delayed("seat_label", **at).empty
    assert list(opslib.delayed("mailer", **at)["job_id"]) == ["7"]
    assert opslib.dead_letters("mailer", **at).empty


def test_bad_arguments_raise_one_clear_error(r: redis.Redis, keys: Keys, at: dict[str, Any]) -> None:
    bury(r, keys, {"kind": "seat_label", "seat": "1-A"}, {"error": "SeatLabelInvalid: '1-A' is bad"})
    with pytest.raises(opslib.OpslibError, match=r"unknown kind 'seat_lable'; did you mean 'seat_label'\?"):
        opslib.dead_letters("seat_lable", **at)
    with pytest.raises(opslib.OpslibError, match="unknown kind 'nope'"):
        opslib.pending("nope", **at)
    with pytest.raises(opslib.OpslibError, match="unknown kind 'nope'"):
        opslib.delayed("nope", **at)
    with pytest.raises(opslib.OpslibError, match="its signature is 'SeatLabelInvalid: <str> is bad'"):
        opslib.dead_letters(signature="SeatLabelInvalid: '1-A' is bad", **at)
    with pytest.raises(opslib.OpslibError, match="since='yesterday-ish' is not a time"):
        opslib.dead_letters(since="yesterday-ish", **at)
    with pytest.raises(opslib.OpslibError, match="limit must be a whole number >= 1"):
        opslib.dead_letters(limit=0, **at)
    with pytest.raises(opslib.OpslibError, match="needs a dead_letters"):
        opslib.failure_groups(pd.DataFrame({"x": []}))


def test_an_unreachable_server_says_where_and_how_to_fix_it() -> None:
    port = free_port()
    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1, retry=QUICK_RETRY)
    with pytest.raises(opslib.OpslibError, match=rf"cannot reach Redis at redis://127.0.0.1:{port}/0 .*make run"):
        opslib.dead_letters(client=client)
    with pytest.raises(opslib.OpslibError, match="cannot reach Redis"):
        opslib.queue_stats(client=client)


def test_finds_the_servers_from_the_environment_or_the_make_run_stack(
    r: redis.Redis, keys: Keys, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bury(r, keys, {"kind": "seat_label", "seat": "1-A"}, {"error": "SeatLabelInvalid: '1-A' is bad"})
    monkeypatch.setenv("QUEUE_PREFIX", keys.prefix)
    monkeypatch.setenv("REDIS_URL", redis_url)
    assert len(opslib.dead_letters()) == 1

    # No URL: a notebook in notebooks/ finds the stack `make run` started in the project folder.
    for name in ("REDIS_URL", "DATABASE_URL", "ARCHIVE_URL", "WORKER_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    monkeypatch.chdir(notebooks)
    with pytest.raises(opslib.OpslibError, match="REDIS_URL is not set and no `make run` stack is running"):
        opslib.dead_letters()
    (tmp_path / ".data").mkdir()
    stack = {"redis_url": redis_url, "database_url": "", "pid": os.getpid()}
    (tmp_path / ".data" / STACK_FILE).write_text(json.dumps(stack))
    assert len(opslib.dead_letters()) == 1

    # Fail closed: once any server URL is set, the stack is no fallback for the others.
    monkeypatch.setenv("DATABASE_URL", "postgresql://postgres@127.0.0.1:1/elsewhere")
    with pytest.raises(opslib.OpslibError, match="REDIS_URL is not set while DATABASE_URL or ARCHIVE_URL is"):
        opslib.dead_letters()


def test_sql_returns_typed_frames(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE seats (id int, label text, changed_at timestamptz)")
        conn.execute("INSERT INTO seats VALUES (1, '14-C', '2026-11-30 22:14:00+01'), (2, '7A', NULL)")
        frame = opslib.sql("SELECT * FROM seats WHERE label LIKE %s ORDER BY id", ["%-%"], conn=conn)
    assert frame.to_dict("list") == {
        "id": [1],
        "label": ["14-C"],
        "changed_at": [pd.Timestamp("2026-11-30 21:14", tz="UTC")],
    }
    assert str(frame["changed_at"].dtype) == "datetime64[ns, UTC]"
    monkeypatch.setenv("DATABASE_URL", pg_url)
    empty = opslib.sql("SELECT id, label FROM seats WHERE id = %(id)s", {"id": 99})
    assert empty.empty and list(empty.columns) == ["id", "label"]
    fix = "UPDATE seats SET label = replace(label, '-', '') WHERE id = %s RETURNING label"
    with pytest.raises(opslib.OpslibError, match=r"read-only transaction; opslib.sql reads only: make a change inside"):
        opslib.sql(fix, [1])  # on its own connection: read-only
    with opslib.transaction() as tx:
        assert tx.sql(fix, [1])["label"].tolist() == ["14C"]
    assert opslib.sql("SELECT label FROM seats WHERE id = 1")["label"].tolist() == ["14C"]  # committed
    with pytest.raises(opslib.OpslibError, match='the query failed: relation "no_such_table" does not exist'):
        opslib.sql("SELECT * FROM no_such_table")
    with pytest.raises(opslib.OpslibError, match="cannot reach PostgreSQL"):
        opslib.sql("SELECT 1", conn=f"postgresql://postgres@127.0.0.1:{free_port()}/x")


def test_a_kind_a_live_worker_declares_is_known_without_a_dead_letter(
    r: redis.Redis, keys: Keys, at: dict[str, Any]
) -> None:
    bury(r, keys, {"kind": "send_reminder", "order_id": "1"}, {"error": "MailTimeout: no answer"})
    r.zadd(keys.workers, {"worker-1": time.time() + 60})
    r.set(keys.declared("worker-1"), json.dumps({"kinds": {"send_email": {"retries": 3}}}))
    assert opslib.dead_letters("send_email", **at).empty  # known, and nothing dead: no "did you mean"
    assert opslib.delayed("send_email", **at).empty and opslib.pending("send_email", **at).empty
    with pytest.raises(opslib.OpslibError, match=r"unknown kind 'send_emial'; did you mean 'send_email'\?"):
        opslib.dead_letters("send_emial", **at)
