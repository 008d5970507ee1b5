"""Replay against a real server and real workers: moves, dry runs, races, and what became of each job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import redis

import opslib
from benchmarks.fixtures import buried_many
from opslib.frames import REPLAY_COLUMNS, STATUS_COLUMNS
from tests.helpers import Workers, queue_state, replay_at_once, wait_for
from tests.opslib.helpers import KINDS, bury, seat_dead_letters
from worker.store.keys import Keys
from worker.store.vocabulary import FINAL_STATUSES

SEAT_ERROR = {"attempts": "2", "error": "SeatLabelInvalid: '14-C' is bad", "traceback": "tb", "reason": "exhausted"}


def test_replay_moves_entries_back_and_reports_missing_ones(r: redis.Redis, keys: Keys, at: dict[str, Any]) -> None:
    job = {"kind": "seat_label", "job_id": "j1", "attempts": "0", "seat": "14-C", "request_id": "7f3a9c2e"}
    dead_id = bury(r, keys, job, {**SEAT_ERROR, "failed_at": "2026-11-30T21:14:00Z", "worker": "w1"})
    done = opslib.replay([dead_id, "1-0", dead_id], **at)
    assert done.dtypes.astype(str).to_dict() == REPLAY_COLUMNS
    batch = done.attrs["batch"]
    assert done[["dead_id", "status"]].values.tolist() == [[dead_id, "replayed"], ["1-0", "missing"]]
    assert set(done["batch"]) == {batch}
    [(new_id, fields)] = [(i.decode(), f) for i, f in r.xrange(keys.jobs) if f.get(b"replay_of")]
    assert done["new_id"][0] == new_id
    assert {k.decode(): v.decode() for k, v in fields.items()} == {
        "kind": "seat_label",
        "job_id": "j1",
        "seat": "14-C",
        "request_id": "7f3a9c2e",
        "attempts": "0",
        "replay_of": dead_id,
        "replay_batch": batch,
        "replays": "1",
    }
    assert r.xlen(keys.dead) == 0
    again = opslib.replay(dead_id, **at)
    assert again["status"].tolist() == ["missing"]
    assert again["new_id"].tolist() == [""]


def test_malformed_ids_change_nothing(r: redis.Redis, keys: Keys, at: dict[str, Any]) -> None:
    dead_id = bury(r, keys, {"kind": "seat_label", "seat": "1-A"}, SEAT_ERROR)
    before = queue_state(r, keys.prefix)
    with pytest.raises(opslib.OpslibError, match=r"'14-C' is not a stream entry id; ids look like 1758203641877-0"):
        opslib.replay([dead_id, "14-C"], **at)
    with pytest.raises(opslib.OpslibError, match="not a replay batch id"):
        opslib.replay_status("no such batch!", **at)
    with pytest.raises(opslib.OpslibError, match="no replay batch 'nothing-here' in Redis"):
        opslib.replay_status("nothing-here", **at)
    assert queue_state(r, keys.prefix) == before


def test_a_dry_run_changes_nothing_and_shows_what_would_be_replayed(
    r: redis.Redis, keys: Keys, at: dict[str, Any]
) -> None:
    seat = [
        bury(r, keys, {"kind": "seat_label", "seat": s}, {**SEAT_ERROR, "error": f"SeatLabelInvalid: {s!r} is bad"})
        for s in ("1-A", "2-B")
    ]
    other = bury(r, keys, {"kind": "mailer", "email": "a@b"}, {"error": "ConnectionError: mail provider answered 503"})
    before = queue_state(r, keys.prefix)
    plan = opslib.replay_kind("seat_label", signature="SeatLabelInvalid: <str> is bad", dry_run=True, **at)
    assert plan.dtypes.astype(str).to_dict() == REPLAY_COLUMNS
    assert plan[["dead_id", "new_id", "status", "batch"]].values.tolist() == [
        [seat[0], "", "would replay", ""],
        [seat[1], "", "would replay", ""],
    ]
    assert opslib.replay([seat[0], "1-0"], dry_run=True, **at)["status"].tolist() == ["would replay", "missing"]
    assert opslib.replay_kind("mailer", error_contains="503", dry_run=True, **at)["dead_id"].tolist() == [other]
    assert opslib.replay_kind("mailer", error_contains="404", dry_run=True, **at).empty
    assert queue_state(r, keys.prefix) == before

    done = opslib.replay_kind("seat_label", error_contains="'2-B'", **at)
    assert done["dead_id"].tolist() == [seat[1]] and done["status"].tolist() == ["replayed"]
    assert opslib.dead_letters(**at).index.tolist() == [seat[0], other]


def test_two_people_replaying_the_same_40_entries_at_once_re_add_40(
    r: redis.Redis, keys: Keys, redis_url: str, tmp_path: Path
) -> None:
    dead_ids = buried_many(r, keys, 40)
    # one in reverse order, so that they meet in the middle
    results = replay_at_once(r, redis_url, keys.prefix, dead_ids, ("forward", "backward"), tmp_path)
    replayed = [result["replayed"] for result in results]
    assert sorted(replayed[0] + replayed[1]) == sorted(dead_ids)  # each entry by exactly one of them
    assert r.xlen(keys.jobs) == 40  # bury deleted the originals: these are the 40 replayed entries
    replay_of = [f[b"replay_of"].decode() for _, f in r.xrange(keys.jobs) if b"replay_of" in f]
    assert sorted(replay_of) == sorted(dead_ids)
    assert r.xlen(keys.dead) == 0


def test_replay_status_follows_success_failure_again_and_retrying(
    r: redis.Redis, keys: Keys, workers: Workers, at: dict[str, Any]
) -> None:
    seat_ids = seat_dead_letters(r, keys, workers)  # 14-C, 7-A, 3-B: attempts 2 each
    mail_id = bury(r, keys, {"kind": "mailer", "job_id": "m1", "attempts": "0"}, {"error": "ConnectionError: 503"})
    seats = opslib.dead_letters("seat_label", **at)["seat"].to_dict()
    r.sadd(f"{keys.prefix}test:fixed_labels", "14-C")  # the data fix, for one of the three

    replayed_at = pd.Timestamp.now(tz="UTC").floor("ms")
    done = opslib.replay([*seat_ids, mail_id], **at)
    batch = done.attrs["batch"]
    queued = opslib.replay_status(batch, **at)
    assert queued.dtypes.astype(str).to_dict() == STATUS_COLUMNS
    assert queued["status"].tolist() == ["still queued"] * 4
    assert queued["where"].tolist() == ["jobs"] * 4
    assert queued["updated_at"].isna().all()

    workers.start(KINDS)

    def settled() -> bool:
        """The seat jobs at their final outcome (a failing one is *retrying* for a moment in between), the
        mail job out of the queue (it waits in ``delayed`` for good)."""
        status = opslib.replay_status(batch, **at).set_index("dead_id")["status"]
        return bool(status[list(seat_ids)].isin(FINAL_STATUSES).all() and status[mail_id] != "still queued")

    wait_for(settled, timeout_s=60, what="every replayed job to run")
    status = opslib.replay_status(batch, **at).set_index("dead_id")
    for dead_id, seat in seats.items():
        row = status.loc[dead_id]
        if seat == "14-C":
            assert (row["status"], row["where"], row["error"]) == ("succeeded", "", "")
        else:
            assert (row["status"], row["where"], row["attempts"]) == ("failed again", "jobs:dead", 2)
            assert row["error"] == f"SeatLabelInvalid: {seat!r} is not a row letter and a seat number"
            assert opslib.dead_letters(**at).loc[row["new_dead_id"], "replay_of"] == dead_id
        assert row["updated_at"] >= replayed_at
    mail = status.loc[mail_id]
    assert (mail["status"], mail["where"], mail["attempts"]) == ("retrying", "delayed", 1)
    assert mail["error"] == "ConnectionError: mail provider answered 503"
    # waiting gives up after wait_s while the mailer keeps retrying
    assert opslib.replay_status(batch, wait_s=0.3, **at).set_index("dead_id").loc[mail_id, "status"] == "retrying"
