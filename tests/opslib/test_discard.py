"""Discard, and replay or discard of entries only the archive still holds (the run's Valkey and PostgreSQL).

The archiver is not running here: rows are written with its own statement
(``dead_row``), and the log records the moves leave are applied by the next
archive-path move or read back from ``jobs:dead:log``.
"""

from __future__ import annotations

import getpass
from typing import Any

import psycopg
import pytest
import redis

import opslib
from opslib.frames import DISCARD_COLUMNS
from tests.helpers import queue_state
from tests.opslib.helpers import bury
from worker import enqueue
from worker.archive.rows import INSERT_ROW, dead_row
from worker.archive.table import migrate
from worker.store.keys import Keys

ERROR = {"attempts": "2", "error": "SeatLabelInvalid: '14-C' is bad", "traceback": "tb", "reason": "exhausted"}


def archive_only(r: redis.Redis, keys: Keys, archive_url: str, fields: dict[str, str]) -> str:
    """A dead entry archived, then trimmed from ``jobs:dead``: only the archive holds it."""
    dead_id = bury(r, keys, fields, ERROR)
    [(_, wire)] = r.xrange(keys.dead, dead_id, dead_id)
    with psycopg.connect(archive_url, autocommit=True) as conn:
        migrate(conn)
        conn.execute(INSERT_ROW, dead_row(keys.queue_prefix, keys.partition, dead_id, list(wire.items())))
    r.xdel(keys.dead, dead_id)
    return dead_id


def row(archive_url: str, keys: Keys, dead_id: str, *columns: str) -> tuple[Any, ...] | None:
    with psycopg.connect(archive_url) as conn:
        return conn.execute(
            f"SELECT {', '.join(columns)} FROM dead_letters WHERE queue = %s AND dead_id = %s", (keys.prefix, dead_id)
        ).fetchone()


def test_discard_takes_entries_out_and_records_who_why_and_the_batch(
    r: redis.Redis, keys: Keys, at: dict[str, Any], archive_url: str
) -> None:
    with psycopg.connect(archive_url, autocommit=True) as conn:
        migrate(conn)
    first = bury(r, keys, {"kind": "seat_label", "seat": "14-C"}, ERROR)
    second = bury(r, keys, {"kind": "seat_label", "seat": "7-A"}, ERROR)
    done = opslib.discard([first, second], reason="orders refunded, INC-2211", **at)
    assert done.dtypes.astype(str).to_dict() == DISCARD_COLUMNS
    assert done[["dead_id", "status"]].values.tolist() == [[first, "discarded"], [second, "discarded"]]
    batch = done.attrs["batch"]
    assert set(done["batch"]) == {batch} and batch
    assert r.xlen(keys.dead) == 0 and r.xlen(keys.jobs) == 0  # taken out, not replayed
    # In the archive when the call returns (PostgreSQL reachable): the log's records applied, then trimmed; the
    # rows, never archived before, come from the fields the records carry.
    assert r.xlen(keys.dead_log) == 0
    for dead_id in (first, second):
        assert row(archive_url, keys, dead_id, "status", "discarded_by", "discard_reason", "discard_batch", "kind") == (
            "discarded", getpass.getuser(), "orders refunded, INC-2211", batch, "seat_label",
        )  # fmt: skip
    assert "14-C" in str(row(archive_url, keys, first, "fields"))
    again = opslib.discard([first, "1-0"], reason="again", by="ana", **at)
    assert again["status"].tolist() == ["missing", "missing"]


def test_discard_without_a_reason_or_with_bad_ids_changes_nothing(
    r: redis.Redis, keys: Keys, at: dict[str, Any]
) -> None:
    dead_id = bury(r, keys, {"kind": "seat_label", "seat": "1-A"}, ERROR)
    before = queue_state(r, keys.prefix)
    for reason in (None, "", "   ", 42):
        with pytest.raises(opslib.OpslibError, match="discard needs a reason"):
            opslib.discard(dead_id, reason=reason, **at)  # type: ignore[arg-type]
    with pytest.raises(opslib.OpslibError, match="discard needs a reason"):
        opslib.discard_kind("seat_label", reason="", **at)
    with pytest.raises(opslib.OpslibError, match="'14-C' is not a stream entry id"):
        opslib.discard([dead_id, "14-C"], reason="x", **at)
    with pytest.raises(opslib.OpslibError, match="by must be a non-empty string"):
        opslib.discard(dead_id, reason="x", by="", **at)
    assert queue_state(r, keys.prefix) == before


def test_a_dry_run_lists_exactly_what_a_discard_takes_and_writes_nothing(
    r: redis.Redis, keys: Keys, at: dict[str, Any], archive_url: str
) -> None:
    seat = [bury(r, keys, {"kind": "seat_label", "seat": s}, {**ERROR, "error": f"E: {s!r}"}) for s in ("1-A", "2-B")]
    bury(r, keys, {"kind": "mailer", "email": "a@b"}, {**ERROR, "error": "ConnectionError: 503"})
    old = archive_only(r, keys, archive_url, {"kind": "seat_label", "seat": "9-Z"})
    before = queue_state(r, keys.prefix)
    plan = opslib.discard_kind("seat_label", reason="duplicates", dry_run=True, **at)
    assert plan.dtypes.astype(str).to_dict() == DISCARD_COLUMNS
    assert plan["dead_id"].tolist() == [*seat, old]
    assert set(plan["status"]) == {"would discard"} and set(plan["batch"]) == {""}
    assert queue_state(r, keys.prefix) == before
    done = opslib.discard_kind("seat_label", reason="duplicates", by="ana", **at)
    assert done["dead_id"].tolist() == plan["dead_id"].tolist() and set(done["status"]) == {"discarded"}
    assert row(archive_url, keys, old, "status", "discarded_by", "discard_reason", "discard_batch") == (
        "discarded", "ana", "duplicates", done.attrs["batch"],
    )  # fmt: skip
    empty = opslib.discard([], reason="nothing", **at)
    assert empty.dtypes.astype(str).to_dict() == DISCARD_COLUMNS and empty.empty


def test_replay_re_adds_an_entry_only_the_archive_holds_once(
    r: redis.Redis, keys: Keys, at: dict[str, Any], archive_url: str
) -> None:
    dead_id = archive_only(r, keys, archive_url, {"kind": "seat_label", "seat": "9-Z", "job_id": "j9"})
    assert opslib.replay(dead_id, dry_run=True, **at)["status"].tolist() == ["would replay"]
    done = opslib.replay([dead_id], **at)
    assert done["status"].tolist() == ["replayed"]
    new_id, batch = done["new_id"][0], done.attrs["batch"]
    [(got, fields)] = [(i.decode(), f) for i, f in r.xrange(keys.jobs) if f.get(b"replay_of")]
    assert got == new_id
    assert fields == {
        b"kind": b"seat_label",
        b"seat": b"9-Z",
        b"job_id": b"j9",
        b"attempts": b"0",
        b"replay_of": dead_id.encode(),
        b"replay_batch": batch.encode(),
        b"replays": b"1",
    }
    assert row(archive_url, keys, dead_id, "status", "replay_batch", "replay_new_id") == ("replayed", batch, new_id)
    assert opslib.replay([dead_id], **at)["status"].tolist() == ["missing"]  # never twice
    assert opslib.discard([dead_id], reason="late", **at)["status"].tolist() == ["missing"]
    assert r.xlen(keys.jobs) == 1
    assert row(archive_url, keys, dead_id, "status") == ("replayed",)


def test_a_bare_id_only_the_archive_holds_is_found_in_a_named_queue(
    r: redis.Redis, keys: Keys, at: dict[str, Any], archive_url: str
) -> None:
    """The archive is searched in every queue in use, not only ``default``'s rows."""
    bulk = Keys(keys.prefix, queue="bulk")
    r.sadd(keys.queues, "bulk")
    dead_id = archive_only(r, bulk, archive_url, {"kind": "seat_label", "seat": "3-C", "job_id": "b3"})
    assert opslib.replay(dead_id, dry_run=True, **at)["status"].tolist() == ["would replay"]
    done = opslib.replay([dead_id], **at)
    assert done["status"].tolist() == ["replayed"]
    assert [f[b"job_id"] for _, f in r.xrange(bulk.jobs)] == [b"b3"] and r.xlen(keys.jobs) == 0


def test_a_move_from_the_archive_applies_the_log_first(
    r: redis.Redis, keys: Keys, at: dict[str, Any], archive_url: str
) -> None:
    """An entry discarded from jobs:dead while PostgreSQL was away (its record not yet applied) while its row
    says dead: a replay must not take it from the archive."""
    dead_id = bury(r, keys, {"kind": "seat_label", "seat": "9-Z"}, ERROR)
    [(_, wire)] = r.xrange(keys.dead, dead_id, dead_id)
    with psycopg.connect(archive_url, autocommit=True) as conn:
        migrate(conn)
        conn.execute(INSERT_ROW, dead_row(keys.prefix, keys.partition, dead_id, list(wire.items())))
    away = "postgresql://postgres@127.0.0.1:1/none"
    assert opslib.discard(dead_id, reason="refunded", by="ana", conn=away, **at)["status"].tolist() == ["discarded"]
    assert r.xlen(keys.dead_log) == 1 and row(archive_url, keys, dead_id, "status") == ("dead",)
    assert opslib.replay(dead_id, dry_run=True, **at)["status"].tolist() == ["missing"]  # the log is read
    assert opslib.replay(dead_id, **at)["status"].tolist() == ["missing"]
    assert row(archive_url, keys, dead_id, "status", "discarded_by") == ("discarded", "ana")
    assert r.xlen(keys.dead_log) == 0  # applied, then trimmed
    assert not [f for _, f in r.xrange(keys.jobs) if f.get(b"replay_of")]


def test_an_archive_that_does_not_answer_stops_only_what_needs_it(
    r: redis.Redis, keys: Keys, at: dict[str, Any]
) -> None:
    in_stream = bury(r, keys, {"kind": "seat_label", "seat": "1-A"}, ERROR)
    before = queue_state(r, keys.prefix)
    away = "postgresql://postgres@127.0.0.1:1/postgres"
    for call in (
        lambda: opslib.discard([in_stream, "1-0"], reason="x", conn=away, **at),
        lambda: opslib.replay([in_stream, "1-0"], conn=away, **at),
        lambda: opslib.replay_kind("seat_label", conn=away, **at),
    ):
        with pytest.raises(opslib.OpslibError) as raised:
            call()
        message = str(raised.value)
        assert "does not answer" in message and "nothing was changed" in message and "\n" not in message
    assert queue_state(r, keys.prefix) == before
    # every id is in jobs:dead: PostgreSQL is not needed, the discard goes ahead and is recorded in the log
    assert opslib.discard([in_stream], reason="x", conn=away, **at)["status"].tolist() == ["discarded"]
    assert r.xlen(keys.dead_log) == 1


def test_a_replay_discard_or_cancel_is_in_the_archive_when_the_call_returns(
    r: redis.Redis, keys: Keys, at: dict[str, Any], archive_url: str
) -> None:
    """psql, Grafana and opslib.sql see the move at once, with no worker running to apply the log."""
    with psycopg.connect(archive_url, autocommit=True) as conn:
        migrate(conn)
    gone, back = (bury(r, keys, {"kind": "seat_label", "seat": s}, ERROR) for s in ("1-A", "2-B"))
    opslib.discard(gone, reason="refunded, INC-2211", by="ana", **at)
    assert row(archive_url, keys, gone, "status", "discarded_by") == ("discarded", "ana")
    opslib.replay(back, **at)
    assert row(archive_url, keys, back, "status") == ("replayed",)
    assert r.xlen(keys.dead_log) == 0
    enqueue(r, "seat_label", {"job_id": "job-9", "seat": "3-C"}, prefix=keys.prefix, delay_s=3600)
    opslib.cancel("job-9", reason="wrong template, INC-2217", by="ana", **at)
    with psycopg.connect(archive_url) as conn:
        found = conn.execute(
            "SELECT status, discarded_by FROM dead_letters WHERE queue = %s AND kind = 'seat_label' "
            "AND fields::text LIKE '%%job-9%%'",
            (keys.prefix,),
        ).fetchall()
    assert found == [("discarded", "ana")]
