"""``python -m opslib runbook``: the investigate-kind runbook executed by papermill against a seeded queue."""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest
import redis

import opslib
from opslib.cli import EXIT_FAILED, EXIT_OK, main
from tests.helpers import Workers, wait_for
from tests.opslib.helpers import KINDS, seat_dead_letters
from worker.store.enqueue import enqueue
from worker.store.keys import GROUP, Keys


@pytest.fixture
def env(redis_url: str, pg_url: str, keys: Keys, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel papermill starts inherits this: the test's queue and a schema without an archive yet."""
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("QUEUE_PREFIX", keys.prefix)
    monkeypatch.setenv("DATABASE_URL", pg_url)
    monkeypatch.setenv("OPSLIB_TZ", "Europe/Prague")


def output_of(notebook: nbformat.NotebookNode, starts: str) -> str:
    [cell] = [c for c in notebook.cells if c.cell_type == "code" and c.source.startswith(starts)]
    return "".join(out.get("data", {}).get("text/plain", "") + out.get("text", "") for out in cell.outputs)


def test_the_runbook_runs_for_a_kind_and_holds_its_counts(
    r: redis.Redis, keys: Keys, workers: Workers, env: None, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    dead = seat_dead_letters(r, keys, workers)
    # A job cancelled before it ran is in the archive as discarded once a worker's archiver applied the record.
    enqueue(r, "seat_label", {"seat": "7C", "job_id": "s-7C"}, run_at=time.time() + 3600, prefix=keys.prefix)
    assert opslib.cancel_delayed("s-7C", reason="order refunded", client=r, prefix=keys.prefix).status[0] == "cancelled"
    workers.burst(KINDS)  # nothing to run: its archiver's final run applies the log

    def archived() -> dict[str, int]:
        statuses = opslib.archive("seat_label", prefix=keys.prefix)["status"]
        return {str(status): int(count) for status, count in statuses.value_counts().items()}

    wait_for(lambda: archived() == {"dead": 3, "discarded": 1}, timeout_s=30, what="the archive to hold the night")
    enqueue(r, "seat_label", {"seat": "9A"}, run_at=time.time() + 3600, prefix=keys.prefix)
    enqueue(r, "seat_label", {"seat": "8B"}, prefix=keys.prefix)
    r.xreadgroup(GROUP, "ghost", {keys.jobs: ">"}, count=1)  # a worker that died holding it
    assert main(["runbook", "seat_label", "--since", "2h", "--out", str(tmp_path)]) == EXIT_OK
    printed = capfd.readouterr()
    notebook_path, html_path = (Path(line) for line in printed.out.split())
    assert notebook_path.parent == tmp_path and notebook_path.name.endswith("Z-seat_label.ipynb")
    executed = nbformat.read(notebook_path, as_version=4)
    counts = output_of(executed, "every_dead = ")
    assert counts.split() == [
        "count",
        "seat_label",
        "dead",
        "letters",
        "3",
        "pending",
        "1",
        "delayed",
        "1",
        "delayed",
        "and",
        "due",
        "0",
    ]
    assert "kind 'seat_label', dead since '2h' ago" in output_of(executed, "import pandas")
    assert "times shown in Europe/Prague" in output_of(executed, "import pandas")
    assert "3  SeatLabelInvalid: <str> is not a row letter and a seat number" in output_of(executed, "groups = ")
    assert "CET" in output_of(executed, "groups = ")
    assert f"Dead letter {dead[-1]} · seat_label · exhausted" in output_of(executed, "for example_id")
    parameters = [c for c in executed.cells if "kind =" in c.source and "since =" in c.source]
    assert len(parameters) == 1 and 'since = "2h"' in parameters[0].source  # once, with the values given
    what_to_do = output_of(executed, "import shlex")
    assert "would replay 3 dead letters:" in what_to_do and "would discard 3 dead letters for good:" in what_to_do
    assert "  python -m opslib replay \\\n      --kind seat_label --since 2h \\\n" in what_to_do
    assert "--signature 'SeatLabelInvalid: <str> is not a row letter and a seat number' \\\n" in what_to_do
    assert "--reason 'why these jobs must never run' \\\n      --dry-run" in what_to_do
    assert "pause('seat_label', ...) would hold 0 waiting jobs and 1 delayed job" in what_to_do  # 8B is running
    assert "  python -m opslib pause seat_label \\\n      --reason 'why it must wait' \\\n      --dry-run" in what_to_do
    assert what_to_do.count("--dry-run") == 3  # replay, discard and pause: each a dry run
    assert "running over TCP" not in printed.err and "KeyboardInterrupt" not in printed.err
    history = output_of(executed, "try:\n    archived = ").split()
    at = history.index("dead")
    assert history[at : at + 6] == ["dead", "3", "replayed", "0", "discarded", "1"]
    assert output_of(executed, "import matplotlib").startswith("<Figure")
    page = html_path.read_text()
    assert "Traceback (most recent call last)" in page and "<script>alert" not in page
    assert "word-break:normal" in page  # output lines wrap between words, never inside a signature


def test_a_failed_cell_exits_1_and_names_the_cell(
    r: redis.Redis, keys: Keys, env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r.set(keys.dead, "not a stream")
    assert main(["runbook", "seat_label", "--out", str(tmp_path)]) == EXIT_FAILED
    captured = capsys.readouterr()
    assert "the runbook failed in code cell" in captured.err and '("every_dead = opslib.dead_letters' in captured.err
    assert "WRONGTYPE" in captured.err
    written = [Path(line) for line in captured.out.split()]
    assert [path.suffix for path in written] == [".ipynb", ".html"] and all(path.exists() for path in written)


def test_bad_parameters_are_refused_before_any_kernel_starts(
    env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runbook", "seat_label", "--since", "yesterday-ish", "--out", str(tmp_path)]) == EXIT_FAILED
    assert "since='yesterday-ish' is not a time" in capsys.readouterr().err
    assert main(["runbook", "seat_label", "--signature", "Boom: 'x' 42", "--out", str(tmp_path)]) == EXIT_FAILED
    assert "is not a signature" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
