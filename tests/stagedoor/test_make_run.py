"""``make run`` (``python -m stagedoor.demo``) from a fresh data folder: embedded
servers, the night's 40 dead letters, the rolling deploy's summary, and Ctrl-C leaving no process behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, wait_for


def descendants(pid: int) -> set[int]:
    """Every process under ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.timeout(120)
def test_make_run_shows_the_night_and_ctrl_c_stops_everything(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL", "QUEUE_PREFIX")}
    env.update(WORKER_DATA_DIR=str(tmp_path / "data"), PYTHONPATH=str(ROOT), XDG_RUNTIME_DIR=str(tmp_path))
    log_path = tmp_path / "make-run.log"

    def shown() -> bool:
        out = log_path.read_text()
        return out.count("was dead-lettered") >= 40 and "Rolling deploy" in out

    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "stagedoor.demo"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        wait_for(lambda: shown() or proc.poll() is not None,
                 timeout_s=90, what="40 dead letters and the rolling deploy in the make run log")  # fmt: skip
        started = descendants(proc.pid)
        assert len(started) >= 3, log_path.read_text()  # the worker, Valkey, PostgreSQL (and its children)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, log_path.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = log_path.read_text()
    assert "started the embedded Valkey" in out and "started the embedded PostgreSQL" in out
    assert "answered 503" in out and "Reconciled" in out and re.search(r"Expired \d+ holds", out)
    assert "The night ended with: outbox 0 unpublished" in out and "40 dead letters" in out
    assert re.search(r"Rolling deploy of ask_feedback v1 -> v2: 30 v1 and 30 v2 jobs; .* \(v1 only; v2 0\), .*"
                     r"failed 0, dead 0\.", out)  # fmt: skip
    assert "Stopped. Nothing this started is left running." in out
    wait_for(lambda: not any(alive(pid) for pid in started), timeout_s=10, what="every child process gone")
