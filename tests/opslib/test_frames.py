"""The pure converters: exact columns and dtypes on empty and filled replies (no Redis)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from opslib import frames
from opslib.frames import (
    CONSUMER_COLUMNS,
    DEAD_COLUMNS,
    DELAYED_COLUMNS,
    PENDING_COLUMNS,
    PENDING_COUNT_COLUMNS,
    REPLAY_COLUMNS,
    STATUS_COLUMNS,
)
from worker.observability.queue_state import Consumer

DEAD = (
    b"1796000000000-0",
    {
        b"kind": b"render_tickets",
        b"order_id": b"4471",
        b"outbox_id": b"88210",
        b"attempts": b"2",
        b"error": b"SeatLabelInvalid: '14-C' is not a row letter and a seat number",
        b"traceback": b"  File render.py, line 88",
        b"reason": b"exhausted",
        b"failed_at": b"2026-11-29T08:53:20.000Z",
        b"worker": b"w1",
        b"request_id": b"7f3a9c2e",
        b"trace": b"4bf92f35",
        b"signature": b"a payload field named like a column",
    },
)


def dtypes(frame: pd.DataFrame) -> dict[str, str]:
    return frame.dtypes.astype(str).to_dict()


def test_dead_to_frame_empty_has_every_column_and_dtype() -> None:
    frame = frames.dead_to_frame([])
    assert dtypes(frame) == DEAD_COLUMNS
    assert frame.index.name == "dead_id"
    assert str(frame.index.dtype) == "str"


@pytest.mark.parametrize("decoded", [False, True])
def test_dead_to_frame_reads_bytes_or_text(decoded: bool) -> None:
    entry = DEAD if not decoded else (DEAD[0].decode(), {k.decode(): v.decode() for k, v in DEAD[1].items()})
    other = ("1796000000001-3", {"kind": "send_email", "email": "a@example.org", "attempts": "x"})
    frame = frames.dead_to_frame([entry, other])
    assert list(frame.columns) == [*DEAD_COLUMNS, "email", "order_id", "field:signature"]
    assert dtypes(frame) == {**DEAD_COLUMNS, "email": "str", "field:signature": "str", "order_id": "str"}
    first = frame.loc["1796000000000-0"]
    assert first["dead_at"] == pd.Timestamp("2026-11-30 00:53:20", tz="UTC")
    identity = (first["kind"], first["job_id"], first["outbox_id"], first["attempts"])
    assert identity == ("render_tickets", "88210", "88210", 2)  # a relayed job: its outbox id is its job_id
    assert first["error_type"] == "SeatLabelInvalid"
    assert first["signature"] == "SeatLabelInvalid: <str> is not a row letter and a seat number"
    assert (first["request_id"], first["trace"], first["worker"]) == ("7f3a9c2e", "4bf92f35", "w1")
    assert first["order_id"] == "4471" and pd.isna(first["email"])
    second = frame.loc["1796000000001-3"]
    assert second["attempts"] == 0  # not a number
    assert second["error"] == "" and second["signature"] == "" and second["reason"] == ""
    assert "failed_at" not in frame.columns  # it is dead_at


def test_dead_to_frame_reads_the_raw_reply_alike() -> None:
    flat = [DEAD[0], [item for pair in DEAD[1].items() for item in pair]]
    pd.testing.assert_frame_equal(frames.dead_to_frame([flat]), frames.dead_to_frame([DEAD]))


def test_select_dead_drops_payload_columns_left_empty() -> None:
    frame = frames.dead_to_frame([DEAD, ("1796000000001-0", {"kind": "send_email", "email": "a@b"})])
    kept = frames.select_dead(frame, frame["kind"] == "render_tickets")
    assert "email" not in kept.columns and "order_id" in kept.columns
    assert dtypes(kept)["dead_at"] == "datetime64[ns, UTC]"


def test_pending_frames() -> None:
    assert dtypes(frames.pending_to_frame([], {})) == PENDING_COLUMNS
    rows = [
        {"message_id": b"1-0", "consumer": b"w1", "time_since_delivered": 90_000, "times_delivered": 2},
        {"message_id": b"2-0", "consumer": b"w1", "time_since_delivered": 10, "times_delivered": 1},
        {"message_id": b"3-0", "consumer": b"w2", "time_since_delivered": 5, "times_delivered": 1},
    ]
    entries = {"1-0": {b"kind": b"a", b"outbox_id": b"9"}, "2-0": {b"kind": b"a", b"job_id": b"j2"}, "3-0": None}
    frame = frames.pending_to_frame(rows, entries)
    assert dtypes(frame) == PENDING_COLUMNS
    assert frame.index.name == "id" and list(frame.index) == ["1-0", "2-0", "3-0"]
    assert list(frame["job_id"]) == ["9", "j2", ""]
    assert list(frame["kind"]) == ["a", "a", ""]
    assert frame.loc["1-0", "idle"] == pd.Timedelta(seconds=90)
    counts = frames.pending_counts_to_frame(frame, pd.Timedelta(seconds=60))
    assert dtypes(counts) == PENDING_COUNT_COLUMNS
    assert counts.to_dict("records")[0] == {
        "queue": "default",
        "consumer": "w1",
        "kind": "a",
        "pending": 2,
        "beyond_reclaim": 1,
        "oldest_idle": pd.Timedelta(seconds=90),
    }
    assert (
        dtypes(frames.pending_counts_to_frame(frames.pending_to_frame([], {}), pd.Timedelta(0)))
        == PENDING_COUNT_COLUMNS
    )


def test_delayed_frame() -> None:
    assert dtypes(frames.delayed_to_frame([], 0.0)) == DELAYED_COLUMNS
    members = [
        (b'{"attempts":"1","job_id":"j1","kind":"send_email"}', 100.0),
        (b"not json", 200.0),
        ('{"attempts":"0","kind":"reminder","outbox_id":"7"}', 300.5),
    ]
    frame = frames.delayed_to_frame(members, now_s=150.0)
    assert dtypes(frame) == DELAYED_COLUMNS
    assert list(frame["due"]) == [True, False, False]
    assert list(frame["kind"]) == ["send_email", "", "reminder"]
    assert list(frame["job_id"]) == ["j1", "", "7"]
    assert list(frame["attempts"]) == [1, 0, 0]
    assert frame["fields"][1] == {"malformed_delayed": "not json"}
    assert frame["run_at"][2] == pd.Timestamp(300.5, unit="s", tz="UTC")


def test_consumers_frame() -> None:
    assert dtypes(frames.consumers_to_frame([])) == CONSUMER_COLUMNS
    frame = frames.consumers_to_frame([Consumer("w1", 2, 1500, live=False), Consumer("w2", 0, 10, live=True)])
    assert dtypes(frame) == CONSUMER_COLUMNS
    assert frame.to_dict("list") == {
        "consumer": ["w1", "w2"],
        "pending": [2, 0],
        "idle": [pd.Timedelta(milliseconds=1500), pd.Timedelta(milliseconds=10)],
        "heartbeat": [False, True],
    }


def test_replay_frames() -> None:
    assert dtypes(frames.replay_to_frame([], [], "", dry_run=True)) == REPLAY_COLUMNS
    done = frames.replay_to_frame(["1-0", "2-0"], [b"9-0", None], "B1", dry_run=False)
    assert dtypes(done) == REPLAY_COLUMNS
    assert done.to_dict("list") == {
        "dead_id": ["1-0", "2-0"],
        "new_id": ["9-0", ""],
        "status": ["replayed", "missing"],
        "batch": ["B1", "B1"],
        "partition": [0, 0],
    }
    assert done.attrs["batch"] == "B1"
    plan = frames.replay_to_frame(["1-0", "2-0"], [True, False], "", dry_run=True)
    assert list(plan["status"]) == ["would replay", "missing"]


def test_replay_status_combines_outcomes_with_where_jobs_are() -> None:
    assert dtypes(frames.replay_status_to_frame("B", {}, [], {}, [])) == STATUS_COLUMNS
    outcomes = {
        b"1-0": json.dumps({"status": "succeeded", "at": "2026-11-30T21:20:00.000Z"}),
        b"2-0": json.dumps({"status": "failed", "dead_id": "50-0", "error": "E: x", "at": "2026-11-30T21:21:00Z"}),
        b"3-0": json.dumps({"status": "retrying", "attempts": 1, "error": "E: y", "at": "2026-11-30T21:22:00Z"}),
        b"4-0": json.dumps({"status": "queued", "new_id": "40-0"}),
        b"5-0": json.dumps({"status": "queued", "new_id": "41-0"}),
        b"10-0": json.dumps({"status": "queued", "new_id": "42-0"}),
    }
    dead_again = [
        (b"50-0", {b"replay_of": b"2-0", b"attempts": b"2", b"error": b"E: x"}),
        (b"51-0", {b"replay_of": b"5-0", b"attempts": b"3", b"error": b"Poison: delivered 3 times"}),
    ]
    frame = frames.replay_status_to_frame("B", outcomes, dead_again, {"4-0": "running", "10-0": "jobs"}, ["3-0"])
    assert dtypes(frame) == STATUS_COLUMNS
    assert list(frame["dead_id"]) == ["1-0", "2-0", "3-0", "4-0", "5-0", "10-0"]
    assert list(frame["status"]) == [
        "succeeded",
        "failed again",
        "retrying",
        "still queued",
        "failed again",
        "still queued",
    ]
    assert list(frame["where"]) == ["", "jobs:dead", "delayed", "running", "jobs:dead", "jobs"]
    assert list(frame["attempts"]) == [0, 2, 1, 0, 3, 0]
    assert list(frame["new_dead_id"]) == ["", "50-0", "", "", "51-0", ""]
    assert frame["updated_at"][0] == pd.Timestamp("2026-11-30 21:20", tz="UTC")
    assert pd.isna(frame["updated_at"][3])
    assert frame["updated_at"][4] == pd.Timestamp(51, unit="ms", tz="UTC")  # poison: the time it was buried
    assert set(frame["batch"]) == {"B"}
