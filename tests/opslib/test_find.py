"""opslib.find(): where a job is now, by job id, entry id, outbox id or payload value."""

from __future__ import annotations

from typing import Any

import pandas as pd
import psycopg
import redis

import opslib
from benchmarks.fixtures import ensure_group
from opslib.find import FIND_COLUMNS, find_to_frame
from tests.opslib.helpers import bury
from tests.opslib.helpers_archive import dead_row, insert_rows
from worker import enqueue
from worker.archive.table import migrate
from worker.store.keys import GROUP, Keys


def test_an_empty_find_keeps_the_columns_and_dtypes() -> None:
    frame = find_to_frame([])
    assert {name: str(dtype) for name, dtype in frame.dtypes.items()} == FIND_COLUMNS


def test_find_says_where_each_job_is(r: redis.Redis, keys: Keys, pg_url: str, at: dict[str, Any]) -> None:
    ensure_group(r, keys)
    dead_id = bury(
        r,
        keys,
        {"kind": "render_tickets", "job_id": "job-4473", "attempts": "1", "order_id": "4473"},
        {"attempts": "2", "error": "SeatLabelInvalid: '14-C'", "traceback": "...", "reason": "exhausted"},
    )
    enqueue(r, "render_tickets", {"job_id": "job-4470", "order_id": "4470"}, prefix=keys.prefix)
    r.xreadgroup(GROUP, "worker-7", {keys.jobs: ">"}, count=1)
    waiting = enqueue(r, "render_tickets", {"job_id": "job-4471", "order_id": "4471"}, prefix=keys.prefix)
    enqueue(r, "send_email", {"job_id": "job-4472", "order_id": "4472"}, prefix=keys.prefix, delay_s=3600)
    replayed_at = pd.Timestamp.now(tz="UTC")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        migrate(conn)
        gone = dead_row(
            (replayed_at - pd.Timedelta("1h")).to_pydatetime(),
            "render_tickets",
            queue=keys.prefix,
            payload={"order_id": "4474"},
            status="replayed",
            replayed_at=replayed_at.to_pydatetime(),
        )
        insert_rows(conn, [gone])

        def where(value: str) -> list[list[Any]]:
            frame = opslib.find(value, conn=conn, **at)
            assert frame.attrs["notes"] == []
            return frame[["where", "kind", "job_id"]].values.tolist()

        assert where("4470") == [["running", "render_tickets", "job-4470"]]
        found = opslib.find("4470", conn=conn, **at).iloc[0]
        assert found["worker"] == "worker-7" and pd.Timedelta(0) <= found["idle"] < pd.Timedelta("1min")
        assert where("4471") == [["waiting", "render_tickets", "job-4471"]]
        assert where("job-4471") == where("4471") and where(waiting) == where("4471")
        assert where("4472") == [["delayed", "send_email", "job-4472"]]
        assert opslib.find("4472", conn=conn, **at)["run_at"].iloc[0] > replayed_at + pd.Timedelta("59min")
        assert where("4473") == [["dead", "render_tickets", "job-4473"]]
        by_id = opslib.find(dead_id, conn=conn, **at)  # the buried job's entry on jobs may have the same id
        dead = by_id[by_id["where"] == "dead"].iloc[0]
        assert (dead["id"], dead["reason"], dead["error"]) == (dead_id, "exhausted", "SeatLabelInvalid: '14-C'")
        archived = opslib.find("4474", conn=conn, **at)
        assert archived[["where", "status"]].values.tolist() == [["archived", "replayed"]]
        assert opslib.find("447", conn=conn, **at).empty  # a whole value, not a part of one


def test_find_in_delayed_matches_a_whole_value_only_however_it_is_written_in_json(
    r: redis.Redis, keys: Keys, at: dict[str, Any]
) -> None:
    escaped = {"job_id": "d-1", "note": 'say "hi"\\now', "city": "Zürich"}
    enqueue(r, "send_email", escaped, delay_s=60, prefix=keys.prefix)
    enqueue(r, "send_email", {"job_id": "d-2", "note": "say hi"}, delay_s=120, prefix=keys.prefix)
    r.zadd(keys.delayed, {"not json": 9e9})  # shown as malformed_delayed, found by its whole text

    def where(value: str) -> list[list[Any]]:
        frame = opslib.find(value, conn=None, **at)
        return frame[["where", "job_id"]].values.tolist()

    assert where('say "hi"\\now') == [["delayed", "d-1"]]  # escaped in the member, found all the same
    assert where("Zürich") == [["delayed", "d-1"]]
    assert where("say hi") == [["delayed", "d-2"]]
    assert where("hi") == [] and where("note") == []  # a part of a value, a field's name
    assert where("not json") == [["delayed", ""]]


def test_find_says_which_field_matched_and_searches_the_trace(
    r: redis.Redis, keys: Keys, pg_url: str, at: dict[str, Any]
) -> None:
    """Job 41 and order 41 are told apart; an entry's ``trace`` is found whole."""
    ensure_group(r, keys)
    fields = {"kind": "render_tickets", "job_id": "41", "attempts": "1", "order_id": "7", "trace": "tr-9f2c"}
    dead_id = bury(r, keys, fields, {"attempts": "2", "error": "SeatLabelInvalid", "reason": "exhausted"})
    enqueue(r, "send_email", {"job_id": "job-5", "order_id": "41"}, prefix=keys.prefix, delay_s=3600)
    waiting = enqueue(r, "render_tickets", {"job_id": "job-6", "order_id": "41"}, prefix=keys.prefix)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        migrate(conn)
        found = opslib.find("41", conn=conn, **at)
        assert found[["where", "job_id", "matched"]].values.tolist() == [
            ["waiting", "job-6", "order_id"],
            ["delayed", "job-5", "order_id"],
            ["dead", "41", "job_id"],
        ]
        assert opslib.find("tr-9f2c", conn=conn, **at)[["where", "id", "matched"]].values.tolist() == [
            ["dead", dead_id, "trace"]
        ]
        assert opslib.find(waiting, conn=conn, **at)["matched"].tolist() == ["id"]
        assert opslib.dead_letters(search="9F2C", **at).index.tolist() == [dead_id]
