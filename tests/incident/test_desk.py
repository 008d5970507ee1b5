"""The incident desk without workers: bad input changes nothing, every action is recorded in order,
and the archive shows a discard or a replay at once (read your own writes)."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

import pandas as pd
import pytest
import redis

import opslib
import worker
from opslib.cli import main
from tests.helpers import Workers, queue_state
from tests.incident.helpers import KINDS
from tests.opslib.helpers import bury
from worker.archive.table import migrate_url
from worker.store.keys import Keys

ERROR = {"error": "ValueError: seat 14-C is not on the map", "traceback": "", "reason": "exhausted"}


def dead_alpha(r: redis.Redis, keys: Keys, count: int) -> list[str]:
    return [bury(r, keys, {"kind": "alpha", "job_id": f"a{n}", "attempts": "1"}, ERROR) for n in range(count)]


@pytest.fixture
def at(r: redis.Redis, prefix: str) -> dict[str, Any]:
    return {"client": r, "prefix": prefix}


@pytest.mark.parametrize(
    ("act", "says"),
    [
        (lambda at: opslib.pause("alpah", reason="x", **at), "unknown kind 'alpah'; did you mean 'alpha'?"),
        (lambda at: opslib.pause("alpha", reason=" ", **at), "pause needs a reason"),
        (lambda at: opslib.throttle("alpha", 0, reason="x", **at), "per_s must be jobs a second > 0"),
        (lambda at: opslib.throttle("alpha", -5, reason="x", **at), "per_s must be jobs a second > 0"),
        (lambda at: opslib.throttle("alpha", True, reason="x", **at), "per_s must be jobs a second > 0"),
        (lambda at: opslib.throttle("alpha", None, **at), "alpha has no throttle set by opslib"),
        (lambda at: opslib.resume("alpha", **at), "alpha is not paused, so there is nothing to resume"),
        (lambda at: opslib.resume("nope", **at), "unknown kind 'nope'"),
    ],
)
def test_bad_input_is_one_clear_line_and_changes_nothing(
    r: redis.Redis, keys: Keys, at: dict[str, Any], act: Any, says: str
) -> None:
    worker.enqueue(r, "alpha", {"job_id": "a"}, prefix=keys.prefix)
    before = queue_state(r, keys.prefix)
    with pytest.raises(opslib.OpslibError) as caught:
        act(at)
    assert says in str(caught.value) and "\n" not in str(caught.value)
    assert queue_state(r, keys.prefix) == before


def test_the_cli_says_what_is_wrong_in_one_line(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("QUEUE_PREFIX", keys.prefix)
    worker.enqueue(r, "alpha", {"job_id": "a"}, prefix=keys.prefix)
    before = queue_state(r, keys.prefix)
    for argv, code, says in (
        (["pause", "alpah", "--reason", "x"], 1, "did you mean 'alpha'?"),
        (["throttle", "alpha", "0", "--reason", "x"], 1, "per_s must be jobs a second > 0"),
        (["throttle", "alpha", "ten", "--reason", "x"], 1, "is not a number"),
        (["resume", "alpha"], 1, "alpha is not paused"),
        (["runbook", "no_such_kind"], 2, "unknown kind 'no_such_kind'"),
    ):
        err = io.StringIO()
        with redirect_stderr(err):
            assert main(argv) == code, argv
        lines = [line for line in err.getvalue().splitlines() if not line.startswith("since ")]  # the window echoed
        assert len(lines) == 1 and says in lines[0], (argv, lines)
    assert queue_state(r, keys.prefix) == before
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["pause", "alpha", "--reason", "seat map", "--dry-run"]) == 0
    assert out.getvalue() == (
        "would pause alpha: its 1 waiting job and 0 delayed jobs would wait until resumed; "
        "nothing changed (drop --dry-run to pause)\n"
    )
    assert (
        queue_state(r, keys.prefix) == before and not opslib.kinds(client=r, prefix=keys.prefix).loc["alpha", "paused"]
    )
    assert main(["pause", "alpha", "--reason", "seat map", "--by", "ana"]) == 0
    assert opslib.kinds(client=r, prefix=keys.prefix).loc["alpha", "paused_by"] == "ana"


def test_actions_list_a_scripted_incident_in_order_with_who_and_why(
    r: redis.Redis, keys: Keys, at: dict[str, Any], archive_url: str
) -> None:
    migrate_url(archive_url)
    dead = dead_alpha(r, keys, 3)
    for n in range(2):
        worker.enqueue(r, "alpha", {"job_id": f"later{n}"}, delay_s=3600, prefix=keys.prefix)
    opslib.pause("alpha", reason="seat map fix, INC-2214", by="ana", **at)
    opslib.throttle("alpha", 5, reason="renderer warming up", by="bob", **at)
    opslib.discard(dead[0], reason="order refunded", by="ana", **at)
    opslib.replay(opslib.dead_letters("alpha", **at).loc[[dead[1]]], reason="seat map fixed", by="carl", **at)
    opslib.run_now("later0", by="dan", **at)
    opslib.cancel_delayed("later1", reason="show cancelled", by="dan", **at)
    opslib.throttle("alpha", None, by="bob", **at)
    opslib.resume("alpha", by="ana", **at)
    done = opslib.actions(kind="alpha", **at)
    assert list(zip(done["action"], done["by"], done["reason"], done["entries"], strict=True)) == [
        ("pause", "ana", "seat map fix, INC-2214", 0),
        ("throttle", "bob", "renderer warming up", 0),
        ("discard", "ana", "order refunded", 1),
        ("replay", "carl", "seat map fixed", 1),
        ("run_now", "dan", "", 1),
        ("cancel_delayed", "dan", "show cancelled", 1),
        ("throttle", "bob", "", 0),
        ("resume", "ana", "", 0),  # no worker ran: nothing was parked
    ]
    assert done["at"].is_monotonic_increasing
    assert all(done["batch"].iloc[2:6] != "")
    assert len(opslib.actions(since="1h", **at)) == len(done)
    assert opslib.actions(since=pd.Timestamp.now(tz="UTC"), **at).empty


def test_with_no_worker_the_archive_shows_a_discard_and_a_replay_at_once(
    r: redis.Redis, keys: Keys, at: dict[str, Any], archive_url: str
) -> None:
    migrate_url(archive_url)
    dead = dead_alpha(r, keys, 3)
    opslib.discard(dead[0], reason="order refunded", by="ana", **at)
    opslib.replay(dead[1], by="carl", **at)
    rows = opslib.archive("alpha", conn=archive_url, **at)
    assert rows.loc[dead[0], "status"] == "discarded" and rows.loc[dead[0], "discarded_by"] == "ana"
    assert rows.loc[dead[1], "status"] == "replayed" and rows.loc[dead[1], "replayed_by"] == "carl"
    assert opslib.show(dead[0], conn=archive_url, **at).life["status"] == "discarded"


def test_replay_status_answers_from_the_archive_once_redis_forgot_the_batch(
    r: redis.Redis, keys: Keys, at: dict[str, Any], archive_url: str, workers: Workers
) -> None:
    migrate_url(archive_url)
    dead = dead_alpha(r, keys, 2)
    batch = opslib.replay(dead, by="carl", **at).attrs["batch"]
    r.delete(keys.replay(batch))  # what its 24-hour expiry does
    status = opslib.replay_status(batch, **at)
    assert list(status["dead_id"]) == dead
    assert set(status["status"]) == {"still queued"}  # no worker has run them: the archive has no outcome yet
    workers.burst(KINDS)
    r.delete(keys.replay(batch))
    status = opslib.replay_status(batch, **at)
    assert list(status["status"]) == ["succeeded", "succeeded"] and set(status["batch"]) == {batch}
    with pytest.raises(opslib.OpslibError, match="no replay batch '20200101T000000Z-00000000' in Redis nor"):
        opslib.replay_status("20200101T000000Z-00000000", **at)


def test_show_follows_a_job_that_failed_again_back_to_its_first_failure(
    r: redis.Redis, keys: Keys, at: dict[str, Any], archive_url: str
) -> None:
    migrate_url(archive_url)
    [first] = dead_alpha(r, keys, 1)
    opslib.replay(first, **at)
    [(new_id, fields)] = r.xrange(keys.jobs)
    job = {k.decode(): v.decode() for k, v in fields.items()}
    r.xdel(keys.jobs, new_id)  # it fails again: buried as the worker would bury it
    again = bury(r, keys, job, {**ERROR, "error": "ValueError: seat 14-C is still not on the map"})
    row = opslib.dead_letters("alpha", **at).loc[again]
    assert (row["replay_of"], row["replays"]) == (first, 1)
    shown = opslib.show(again, conn=archive_url, **at)
    assert shown.chain == [(first, ERROR["error"])]
    assert "Failed before (replayed, back to the first failure)" in str(shown)
