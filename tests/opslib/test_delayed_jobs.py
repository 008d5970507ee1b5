"""``run_now`` and ``cancel_delayed``: moves, dry runs, bad input, the CLI, and races with a promoting worker."""

from __future__ import annotations

import io
import time
from typing import Any

import pandas as pd
import psycopg
import pytest
import redis

import opslib
from opslib.cli import EXIT_NOT_CONFIRMED, EXIT_OK, main
from opslib.moves.delayed_jobs import MOVE_COLUMNS
from tests.helpers import Workers, queue_state, wait_for
from tests.opslib.helpers import KINDS
from worker.archive.dead_log import CANCELLED_SUFFIX
from worker.archive.table import migrate
from worker.store.enqueue import enqueue
from worker.store.heartbeats import live_workers
from worker.store.keys import Keys
from worker.store.vocabulary import REASON_CANCELLED


def later(r: redis.Redis, keys: Keys, count: int, *, first_s: float = 3600, step_s: float = 0.0) -> list[str]:
    """``count`` tally jobs in ``delayed``, due ``first_s`` from now and ``step_s`` apart; their job ids."""
    now = time.time()
    for number in range(count):
        enqueue(r, "tally", {"job_id": f"t{number}"}, run_at=now + first_s + number * step_s, prefix=keys.prefix)
    return [f"t{number}" for number in range(count)]


def test_run_now_moves_jobs_onto_the_stream_with_their_fields(r: redis.Redis, keys: Keys, at: dict[str, Any]) -> None:
    later(r, keys, 3)
    r.zadd(keys.delayed, {"not json": 1.0})
    done = opslib.run_now(opslib.delayed(**at).query("job_id in ['t0', 't2']"), **at)
    assert done.dtypes.astype(str).to_dict() == MOVE_COLUMNS
    assert done[["job_id", "status"]].values.tolist() == [["t0", "queued"], ["t2", "queued"]]
    assert set(done["batch"]) == {done.attrs["batch"]} and done.attrs["batch"]
    moved = [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in r.xrange(keys.jobs)]
    assert moved == [{"kind": "tally", "job_id": job_id, "attempts": "0"} for job_id in ("t0", "t2")]
    assert opslib.delayed(**at)["job_id"].tolist() == ["", "t1"]  # the malformed member stays for the worker
    assert opslib.run_now(["t0", "nope"], **at)["status"].tolist() == ["missing", "missing"]


def test_cancel_takes_jobs_out_and_a_dry_run_changes_nothing(r: redis.Redis, keys: Keys, at: dict[str, Any]) -> None:
    later(r, keys, 3)
    before = queue_state(r, keys.prefix)
    plan = opslib.cancel_delayed(["t1", "t9"], reason="order refunded", dry_run=True, **at)
    assert plan[["job_id", "status", "batch"]].values.tolist() == [["t1", "would cancel", ""], ["t9", "missing", ""]]
    assert opslib.run_now("t1", dry_run=True, **at)["status"].tolist() == ["would queue"]
    assert queue_state(r, keys.prefix) == before
    done = opslib.cancel_delayed("t1", reason="order refunded", **at)
    assert done["status"].tolist() == ["cancelled"]
    assert opslib.delayed(**at)["job_id"].tolist() == ["t0", "t2"] and r.xlen(keys.jobs) == 0


def test_bad_input_is_one_clear_error_and_changes_nothing(r: redis.Redis, keys: Keys, at: dict[str, Any]) -> None:
    later(r, keys, 1)
    before = queue_state(r, keys.prefix)
    with pytest.raises(opslib.OpslibError, match="reason must say why these jobs must not run"):
        opslib.cancel_delayed(["t0"], reason=" ", **at)
    with pytest.raises(opslib.OpslibError, match=r"'' is not a job id; use the job_id column of delayed\(\)"):
        opslib.run_now(["t0", ""], **at)
    with pytest.raises(opslib.OpslibError, match="job_ids must be job ids"):
        opslib.run_now(5, **at)
    assert queue_state(r, keys.prefix) == before


def test_the_cli_asks_then_moves(
    r: redis.Redis, keys: Keys, redis_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    later(r, keys, 2)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("QUEUE_PREFIX", keys.prefix)
    assert main(["cancel", "t0", "--reason", "refunded"], stdin=io.StringIO()) == EXIT_NOT_CONFIRMED
    captured = capsys.readouterr()
    assert "would cancel 1 job\n" in captured.out and "t0" in captured.out
    assert "no terminal to confirm on; add --yes to cancel without asking" in captured.err
    assert main(["run-now", "t1", "t7", "--dry-run"]) == EXIT_OK
    assert "would run now 1 delayed job; 1 id is not in delayed" in capsys.readouterr().out
    assert main(["run-now", "t1", "--yes"]) == EXIT_OK
    assert "queued 1, missing 0" in capsys.readouterr().out
    assert main(["cancel", "t0", "--reason", "refunded", "--yes"]) == EXIT_OK
    assert "cancelled 1, missing 0" in capsys.readouterr().out
    assert r.zcard(keys.delayed) == 0 and r.xlen(keys.jobs) == 1
    with pytest.raises(SystemExit):
        main(["cancel", "t0"])  # --reason is required


def runs(r: redis.Redis, keys: Keys) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in r.hgetall(f"{keys.prefix}test:runs").items()}


def settle(r: redis.Redis, keys: Keys, expected_runs: int) -> dict[str, int]:
    wait_for(
        lambda: r.zcard(keys.delayed) == 0 and sum(runs(r, keys).values()) >= expected_runs,
        timeout_s=60,
        what="the promoted jobs to run",
    )
    return runs(r, keys)


@pytest.mark.parametrize("action", ["run_now", "cancel_delayed"])
def test_racing_a_promoting_worker_each_job_runs_once_or_is_cancelled(
    r: redis.Redis, keys: Keys, workers: Workers, at: dict[str, Any], action: str
) -> None:
    """Jobs fall due one after another while a worker promotes them; each small batch is taken at the
    moment it falls due, when the worker's promotion is due too. Each job ends run exactly once, or
    cancelled and never run."""
    workers.start(KINDS, WORKER_NAME="promoter")
    wait_for(lambda: "promoter" in live_workers(r, keys), timeout_s=30, what="the worker to start")
    step_s, first_s = 0.01, 0.5
    start_at = time.time() + first_s
    job_ids = later(r, keys, 300, first_s=first_s, step_s=step_s)
    statuses: dict[str, str] = {}
    for start in range(0, len(job_ids), 5):
        chunk = job_ids[start : start + 5]
        time.sleep(max(0.0, start_at + start * step_s - time.time()))  # pace the calls with the due times
        if action == "run_now":
            done = opslib.run_now(chunk, **at)
        else:
            done = opslib.cancel_delayed(chunk, reason="race test", **at)
        statuses |= dict(zip(done["job_id"], done["status"], strict=True))
    assert set(statuses) == set(job_ids)
    taken = {job_id for job_id, status in statuses.items() if status != "missing"}
    assert taken and taken != set(job_ids), "the race had no loser on one side: widen the spread"
    if action == "run_now":
        ran = settle(r, keys, len(job_ids))
        assert ran == dict.fromkeys(job_ids, 1)
    else:
        ran = settle(r, keys, len(job_ids) - len(taken))
        assert set(ran.values()) == {1}
        assert set(ran) == set(job_ids) - taken


def test_a_cancelled_job_is_archived_as_discarded_with_its_reason_and_never_runs(
    r: redis.Redis, keys: Keys, workers: Workers, at: dict[str, Any], archive_url: str
) -> None:
    """The cancel script's own ``discarded`` record reaches the archive through the worker's archiver (made
    while PostgreSQL is away: with it there, the cancel applies its records itself before it returns)."""
    later(r, keys, 3, first_s=1.0)
    with pytest.MonkeyPatch.context() as away:
        away.setenv("ARCHIVE_URL", "postgresql://postgres@127.0.0.1:1/none")
        done = opslib.cancel_delayed(["t0", "t2"], reason="order 4471 was refunded", by="ana", **at)
    records = [{k.decode(): v.decode() for k, v in f.items()} for _, f in r.xrange(keys.dead_log)]
    assert [record["f.job_id"] for record in records] == ["t0", "t2"]
    dead_ids = [record["dead_id"] for record in records]
    assert len(set(dead_ids)) == 2 and all(dead_id.endswith(CANCELLED_SUFFIX) for dead_id in dead_ids)
    record = records[0]
    assert (record["event"], record["batch"], record["f.reason"]) == ("discarded", done.attrs["batch"], "cancelled")
    with psycopg.connect(archive_url, autocommit=True) as conn:
        migrate(conn)  # as the worker does when it starts: the table exists before the first poll
    workers.start(KINDS, WORKER_NAME="archiver")

    def archived() -> bool:
        return len(opslib.archive(status="discarded", prefix=keys.prefix)) == 2

    wait_for(lambda: archived() and runs(r, keys).get("t1") == 1, timeout_s=60, what="t1 to run and the archive's rows")
    rows = opslib.archive(status="discarded", prefix=keys.prefix)
    assert sorted(rows.index) == sorted(dead_ids)
    row = rows.loc[record["dead_id"]]
    assert (row["kind"], row["job_id"], row["reason"]) == ("tally", "t0", REASON_CANCELLED)
    assert (row["discard_reason"], row["discarded_by"]) == ("order 4471 was refunded", "ana")
    assert row["dead_at"] <= row["discarded_at"] + pd.Timedelta("1s")
    assert runs(r, keys) == {"t1": 1} and r.zcard(keys.delayed) == 0
    # The worker ran past both cancelled jobs' due times and archived their records: neither was
    # promoted, run or buried, so nothing went through jobs:dead (the rows came from the log alone).
    assert r.xlen(keys.dead) == 0
