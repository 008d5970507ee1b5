"""``python -m opslib``: output, confirmation of replays, exit codes."""

from __future__ import annotations

import io
import json
import os
import pty
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import TextIO

import pandas as pd
import psycopg
import pytest
import redis

from opslib.cli import EXIT_FAILED, EXIT_NOT_CONFIRMED, EXIT_OK, EXIT_USAGE, main
from tests.helpers import ROOT, Workers
from tests.opslib.helpers import bury
from worker import NewJob, enqueue_many
from worker.archive.table import migrate
from worker.embedded.servers import free_port
from worker.store.keys import Keys


@pytest.fixture
def env(redis_url: str, keys: Keys, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Point opslib at the test's queue through the environment, as an operator's shell would."""
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("QUEUE_PREFIX", keys.prefix)
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.fixture
def dead(r: redis.Redis, keys: Keys) -> list[str]:
    return [
        bury(r, keys, {"kind": "seat_label", "seat": s, "order_id": "7"}, {"error": f"SeatLabelInvalid: {s!r} is bad"})
        for s in ("14-C", "7-A")
    ]


@pytest.fixture
def terminal() -> Iterator[tuple[TextIO, int]]:
    """A real pseudo-terminal: (its reading end as the CLI's stdin, the fd to type into)."""
    typist, line = pty.openpty()
    stdin = os.fdopen(line, "r")
    try:
        yield stdin, typist
    finally:
        stdin.close()
        os.close(typist)


def run(*argv: str, stdin: TextIO | None = None) -> int:
    return main(list(argv), stdin=stdin or io.StringIO())


def test_queries_print_tables_json_and_csv(
    env: dict[str, str], dead: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("stats") == EXIT_OK
    assert "dead_evicted" in capsys.readouterr().out
    assert run("dead") == EXIT_OK
    out = capsys.readouterr().out
    assert dead[0] in out and "SeatLabelInvalid: '14-C' is bad" in out
    assert run("dead", "--kind", "seat_label", "--json") == EXIT_OK
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["dead_id"] for row in rows] == dead and rows[0]["seat"] == "14-C"
    assert run("dead", "--csv") == EXIT_OK
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out), dtype=str)
    assert frame["dead_id"].tolist() == dead
    assert run("groups") == EXIT_OK
    assert "SeatLabelInvalid: <str> is bad" in capsys.readouterr().out
    assert run("pending") == EXIT_OK
    assert "(none)" in capsys.readouterr().out


def test_replay_asks_on_a_terminal(
    env: dict[str, str],
    dead: list[str],
    r: redis.Redis,
    keys: Keys,
    terminal: tuple[TextIO, int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    stdin, typist = terminal
    os.write(typist, b"n\n")
    assert run("replay", "--kind", "seat_label", stdin=stdin) == EXIT_NOT_CONFIRMED
    out = capsys.readouterr().out
    assert "would replay 2 dead letters" in out and "Replay 2 dead letters? [y/N]" in out and "not done" in out
    assert r.xlen(keys.dead) == 2
    os.write(typist, b"y\n")
    assert (
        run("replay", "--kind", "seat_label", "--signature", "SeatLabelInvalid: <str> is bad", stdin=stdin) == EXIT_OK
    )
    out = capsys.readouterr().out
    assert "replayed 2, missing 0" in out
    batch = out.split("batch ")[1].split()[0]
    assert r.xlen(keys.dead) == 0
    assert run("status", batch) == EXIT_OK
    assert "still queued    2" in capsys.readouterr().out


def test_replay_without_a_terminal_needs_yes(
    env: dict[str, str], dead: list[str], r: redis.Redis, keys: Keys, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("replay", dead[0]) == EXIT_NOT_CONFIRMED
    assert "no terminal to confirm on; add --yes" in capsys.readouterr().err
    assert run("replay", "--kind", "seat_label", "--dry-run") == EXIT_OK
    assert r.xlen(keys.dead) == 2
    assert run("replay", dead[0], "1-0", "--yes") == EXIT_OK
    assert "replayed 1, missing 0" in capsys.readouterr().out
    assert run("replay", dead[0], "--yes") == EXIT_OK  # already replayed: reported, not an error
    assert "would replay 0 dead letters; 1 id is not in jobs:dead" in capsys.readouterr().out
    assert r.xlen(keys.dead) == 1


def test_errors_exit_with_their_codes(env: dict[str, str], dead: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert run("replay", "14-C", "--yes") == EXIT_FAILED
    assert "'14-C' is not a stream entry id" in capsys.readouterr().err
    assert run("replay", "--kind", "seat_lable", "--yes") == EXIT_FAILED
    assert "did you mean 'seat_label'?" in capsys.readouterr().err
    assert run("status", "nothing-here") == EXIT_FAILED
    with pytest.raises(SystemExit) as usage:
        run("replay")
    assert usage.value.code == EXIT_USAGE
    with pytest.raises(SystemExit) as usage:
        run("replay", dead[0], "--kind", "seat_label")
    assert usage.value.code == EXIT_USAGE


def test_the_module_runs_and_exits_with_the_code(env: dict[str, str], dead: list[str]) -> None:
    """As a process: no terminal, no --yes: refused (3); an unreachable server: 1."""
    refused = subprocess.run(
        [sys.executable, "-m", "opslib", "replay", dead[0]],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == EXIT_NOT_CONFIRMED, refused.stderr
    assert "would replay 1 dead letter\n" in refused.stdout
    away = subprocess.run(
        [sys.executable, "-m", "opslib", "stats"],
        env={**env, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert away.returncode == EXIT_FAILED
    assert away.stderr.startswith("error: cannot reach Redis at redis://127.0.0.1:")


def test_dead_search_until_signature_and_groups_since(
    env: dict[str, str], dead: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run("dead", "--search", "7-a", "--json") == EXIT_OK
    assert [json.loads(line)["dead_id"] for line in capsys.readouterr().out.splitlines()] == [dead[1]]
    signature = "SeatLabelInvalid: <str> is bad"
    assert run("dead", "--signature", signature, "--csv") == EXIT_OK
    assert pd.read_csv(io.StringIO(capsys.readouterr().out), dtype=str)["dead_id"].tolist() == dead
    monkeypatch.setenv("OPSLIB_TZ", "Europe/Prague")
    died = pd.Timestamp(int(dead[0].split("-")[0]), unit="ms", tz="UTC")
    typed = (died - pd.Timedelta("1min")).tz_convert("Europe/Prague").strftime("%Y-%m-%d %H:%M")
    assert run("dead", "--until", typed, "--json") == EXIT_OK
    captured = capsys.readouterr()
    assert captured.out.strip() == ""  # read in Prague's time: a minute before both died (read as UTC: an hour after)
    utc = (died - pd.Timedelta("1min")).strftime("%H:%M")
    assert captured.err.startswith("until ") and f"{typed[11:]} CET ({utc} UTC)" in captured.err
    assert run("groups", "--since", typed, "--json") == EXIT_OK
    assert json.loads(capsys.readouterr().out.splitlines()[0])["count"] == 2


def test_find_prints_where_a_job_is_or_one_line_and_exit_1(
    env: dict[str, str], dead: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARCHIVE_URL", "postgresql://127.0.0.1:1/none")  # no archive there: a note, not a failure
    assert run("find", dead[0]) == EXIT_OK
    captured = capsys.readouterr()
    assert captured.out.startswith("dead       seat_label") and f"entry {dead[0]}" in captured.out
    assert "note: the archive was not read" in captured.err and "Traceback" not in captured.err
    assert run("find", "order-0000") == EXIT_FAILED
    assert capsys.readouterr().out == "order-0000: not found in jobs, delayed, jobs:dead or the archive\n"


def test_flow_history_and_archive_commands_answer(
    env: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run("flow", "--since", "2h", "--freq", "15min") == EXIT_OK
    captured = capsys.readouterr()
    assert captured.out.strip() == "(none)" and captured.err.startswith("since ")
    monkeypatch.setenv("ARCHIVE_URL", "postgresql://127.0.0.1:1/none")
    for command in ("history", "archive"):
        assert run(command) == EXIT_FAILED
        err = capsys.readouterr().err
        assert err.splitlines()[-1].startswith("error: cannot reach PostgreSQL") and "Traceback" not in err


@pytest.mark.parametrize("typed", ["today", "yesterday", "9pm", "21:00", "yesterday 21:00", "2h"])
def test_every_form_of_the_time_grammar_reads_from_the_command_line(
    typed: str, env: dict[str, str], dead: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    for command in ("dead", "groups"):  # archive and history: the same parse, refused alike below
        assert run(command, "--since", typed, "--json") == EXIT_OK
        captured = capsys.readouterr()
        assert captured.err.startswith("since ") and "Traceback" not in captured.err
        if command == "dead" and typed in ("today", "yesterday", "yesterday 21:00"):  # before the entries died
            assert len(captured.out.splitlines()) == len(dead)
    assert run("flow", "--since", typed) == EXIT_OK
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("typed", ["12/01 21:00", "1969-06-01", "2999-01-01", "tomorrow"])
def test_a_time_out_of_the_grammar_is_one_line_and_exit_1(
    typed: str, env: dict[str, str], dead: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    for command in ("dead", "archive", "flow", "history", "actions"):
        assert run(command, "--since", typed) == EXIT_FAILED
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and err.startswith(f"error: since={typed!r} ") and "'yesterday 21:00'" in err


def test_flow_prints_the_busy_periods_and_says_how_many_were_quiet(
    env: dict[str, str], r: redis.Redis, keys: Keys, workers: Workers, capsys: pytest.CaptureFixture[str]
) -> None:
    enqueue_many(r, [NewJob("flow_ok"), NewJob("flow_refused")], prefix=keys.prefix)
    workers.burst("tests.opslib.kinds_flow", ARCHIVE_URL="off")
    assert run("flow", "--since", "1h") == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].endswith("periods had nothing in them (not shown; --all shows every period)")
    assert 2 <= len(lines) - 2 <= 5  # a header, one or two busy minutes of two kinds, the note
    assert run("flow", "--since", "1h", "--all", "--json") == EXIT_OK
    assert len(capsys.readouterr().out.splitlines()) >= 120  # 60 minutes, two kinds
    assert run("flow", "--since", "10D", "--freq", "1D", "--all") == EXIT_OK
    out = capsys.readouterr().out
    assert "not kept" in out.splitlines()[1] and "are not kept (counted as missing, not as 0)" in out


def test_an_id_that_never_was_a_dead_letter_says_so(
    env: dict[str, str],
    dead: list[str],
    pg_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        migrate(conn)
    monkeypatch.setenv("ARCHIVE_URL", pg_url)
    assert run("replay", "1-0", "--yes") == EXIT_OK
    out = capsys.readouterr().out
    assert "would replay 0 dead letters; 1 id is not in jobs:dead nor dead in the archive: 1-0 was never" in out
    assert run("discard", "1-0", "2-0", "--reason", "typo test", "--yes") == EXIT_OK
    assert "1-0, 2-0 were never a dead letter of this queue" in capsys.readouterr().out


def test_actions_status_kinds_and_find_take_json_and_csv(
    env: dict[str, str], dead: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARCHIVE_URL", "off")
    assert run("replay", dead[0], "--yes") == EXIT_OK
    batch = capsys.readouterr().out.split("batch ")[1].split()[0]
    assert run("actions", "--json") == EXIT_OK
    assert [json.loads(line)["action"] for line in capsys.readouterr().out.splitlines()] == ["replay"]
    assert run("status", batch, "--csv") == EXIT_OK
    assert pd.read_csv(io.StringIO(capsys.readouterr().out), dtype=str)["dead_id"].tolist() == [dead[0]]
    assert run("kinds", "--json") == EXIT_OK
    assert "seat_label" in [json.loads(line)["kind"] for line in capsys.readouterr().out.splitlines()]
    assert run("find", dead[1], "--json") == EXIT_OK
    found = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(row["where"], row["matched"]) for row in found] == [("dead", "id")]
    assert run("find", "nothing-like-it", "--csv") == EXIT_FAILED


def test_dead_of_a_kind_a_live_worker_declares_is_empty_not_unknown(
    env: dict[str, str], dead: list[str], r: redis.Redis, keys: Keys, capsys: pytest.CaptureFixture[str]
) -> None:
    r.zadd(keys.workers, {"worker-1": time.time() + 60})
    r.set(keys.declared("worker-1"), json.dumps({"kinds": {"send_email": {}}}))
    assert run("dead", "--kind", "send_email") == EXIT_OK
    captured = capsys.readouterr()
    assert captured.out.strip() == "(none)" and "unknown kind" not in captured.err
