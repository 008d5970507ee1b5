"""Helpers for tests: worker processes, polling with a deadline, per-test schemas."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis

ROOT = Path(__file__).resolve().parents[1]


def with_schema(url: str, schema: str) -> str:
    """``url`` with ``search_path`` set to ``schema`` for every connection."""
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options={quote(f'-csearch_path={schema}')}"


class Workers:
    """Starts ``python -m worker`` processes for a test and stops every one of them."""

    def __init__(self, redis_url: str, prefix: str, tmp: Path) -> None:
        self.redis_url = redis_url
        self.prefix = prefix
        self.tmp = tmp
        self.procs: list[subprocess.Popen[str]] = []

    def env(self, kinds: str, **extra: str) -> dict[str, str]:
        env = {
            **os.environ,
            "REDIS_URL": self.redis_url,
            "QUEUE_PREFIX": self.prefix,
            "WORKER_KINDS": kinds,
            "PYTHONPATH": str(ROOT),
            "STAGEDOOR_DATA_DIR": str(self.tmp / "data"),
        }
        env.update(extra)
        return env

    def start(self, kinds: str, *args: str, log_name: str | None = None, **extra: str) -> subprocess.Popen[str]:
        """Start a worker; its stderr goes to a log file in the test's tmp dir."""
        log_path = self.tmp / (log_name or f"worker-{len(self.procs)}.log")
        log_file = open(log_path, "w")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, "-m", "worker", *args],
            cwd=ROOT,
            env=self.env(kinds, **extra),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            text=True,
        )
        proc.log_path = log_path  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def burst(self, kinds: str, timeout_s: float = 60, **extra: str) -> subprocess.CompletedProcess[str]:
        """Run ``python -m worker --burst`` to the end; fail the test if it does not exit 0."""
        proc = self.start(kinds, "--burst", **extra)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail(f"worker --burst did not finish within {timeout_s} s:\n{self.log(proc)}")
        out = self.log(proc)
        assert proc.returncode == 0, f"worker --burst exited {proc.returncode}:\n{out}"
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")

    @staticmethod
    def log(proc: subprocess.Popen[str]) -> str:
        return Path(proc.log_path).read_text()  # type: ignore[attr-defined]

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def wait_for(predicate: Callable[[], object], timeout_s: float = 30, what: str = "condition") -> object:
    """Poll ``predicate`` until it returns something truthy, or fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}")


def queue_state(r: redis.Redis, prefix: str) -> dict[bytes, Any]:
    """Every key under ``prefix`` with its whole content, to show that nothing changed."""
    state: dict[bytes, Any] = {}
    for key in sorted(r.scan_iter(match=f"{prefix}*", count=1000)):
        kind = r.type(key)
        if kind == b"stream":
            state[key] = r.xrange(key)
        elif kind == b"zset":
            state[key] = r.zrange(key, 0, -1, withscores=True)
        elif kind == b"hash":
            state[key] = r.hgetall(key)
        else:
            state[key] = r.dump(key)
    return state
