"""Helpers for tests: worker processes, polling with a deadline, per-test schemas."""

from __future__ import annotations

import glob
import importlib
import io
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from benchmarks.fixtures import with_schema as with_schema
from stagedoor.queues import WORKER_QUEUES as STAGEDOOR_QUEUES
from worker import run_worker
from worker.kinds import Registry
from worker.settings import Settings

ROOT = Path(__file__).resolve().parents[1]


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
            "WORKER_DATA_DIR": str(self.tmp / "data"),
        }
        if "stagedoor.kinds" in kinds.split(","):  # Stagedoor's kinds are in its queues: serve them all
            env["WORKER_QUEUES"] = STAGEDOOR_QUEUES
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

    def here(self, kinds: str, timeout_s: float = 60, **extra: str) -> subprocess.CompletedProcess[str]:
        """Run one worker of ``kinds`` in this process (:func:`worker.run_worker`) until the queue drains, as
        :meth:`burst` does in a process of its own, without the start of one; its log lines are the result's
        ``stdout``. Fails the test if it does not stop 0 within ``timeout_s``."""
        settings = Settings.from_env(self.env(kinds, **extra))
        stop, out = threading.Event(), io.StringIO()
        handler = logging.StreamHandler(out)
        handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
        logger = logging.getLogger("worker")
        level = logger.level
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        timer = threading.Timer(timeout_s, stop.set)
        timer.start()
        try:
            code = run_worker(settings, registry=registry_of(kinds), burst=True, stop=stop)
        finally:
            timer.cancel()
            logger.removeHandler(handler)
            logger.setLevel(level)
        if stop.is_set():
            pytest.fail(f"the worker did not drain the queue within {timeout_s} s:\n{out.getvalue()}")
        assert code == 0, f"run_worker returned {code}:\n{out.getvalue()}"
        return subprocess.CompletedProcess(["run_worker", kinds], code, out.getvalue(), "")

    @staticmethod
    def log(proc: subprocess.Popen[str]) -> str:
        return Path(proc.log_path).read_text()  # type: ignore[attr-defined]

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def registry_of(module: str) -> Registry:
    """The kinds, schedules and lifespans that ``module`` declared, alone: the process-wide registry holds
    those of every kinds module the tests imported so far."""
    importlib.import_module(module)
    from worker.kinds import REGISTRY

    def mine(declared: Any) -> bool:
        return getattr(declared, "__module__", None) == module

    kinds = {name: spec for name, spec in REGISTRY.kinds.items() if mine(spec.handler)}
    return Registry(
        kinds=kinds,
        schedules={name: declared for name, declared in REGISTRY.schedules.items() if declared.kind in kinds},
        lifespans=[managed for managed in REGISTRY.lifespans if mine(managed)],
    )


def exits_within_grace(proc: subprocess.Popen[str]) -> float:
    """SIGTERM ``proc`` (a worker with SHUTDOWN_GRACE_S=1 and STOP_GRACE_S=1) and check that it exits 0
    within both graces and a second and a half; the time it took is printed (docs/worker.md's figure)."""
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    took_s = time.monotonic() - sent
    print(f"exited {took_s:.2f} s after SIGTERM (SHUTDOWN_GRACE_S=1, STOP_GRACE_S=1)")
    assert took_s < 1 + 1 + 1.5, f"the worker took {took_s:.2f} s to exit"
    return took_s


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


MOVER = """
import json, random, sys
import redis, opslib
redis_url, prefix, go, ids_file, verb, order = sys.argv[1:7]
ids = json.loads(open(ids_file).read())
if order == "backward":
    ids.reverse()
elif order == "shuffled":
    random.Random(6).shuffle(ids)
client = redis.Redis.from_url(redis_url)
client.rpush(go + ":ready", 1)
client.blpop([go], timeout=60)
if verb == "replay":
    done, taken = opslib.replay(ids, client=client, prefix=prefix), "replayed"
else:
    done, taken = opslib.discard(ids, reason="race", by="racer", client=client, prefix=prefix), "discarded"
print(json.dumps({taken: done[done.status == taken].dead_id.tolist(),
                  "counts": done["status"].value_counts().to_dict()}))
"""


def move_at_once(
    r: redis.Redis,
    redis_url: str,
    prefix: str,
    dead_ids: list[str],
    moves: tuple[tuple[str, str], tuple[str, str]],
    folder: Path,
) -> list[dict[str, Any]]:
    """Two processes move the same ids at the same moment, each ``(verb, order)``: verb "replay"
    (``opslib.moves.replay``) or "discard" (``opslib.moves.discard``), order "forward", "backward" or
    "shuffled"; released together once both wait.

    Returns each process's ``{"replayed" or "discarded": [dead ids], "counts": {status: n}}``.
    """
    ids_file = folder / "move-ids.json"
    ids_file.write_text(json.dumps(dead_ids))
    go = f"{prefix}test:move-go"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", MOVER, redis_url, prefix, go, str(ids_file), verb, order],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for verb, order in moves
    ]
    try:
        wait_for(
            lambda: r.llen(go + ":ready") == 2 or any(p.poll() is not None for p in procs),
            timeout_s=60,
            what="both processes to wait for the start signal",
        )
        r.rpush(go, 1, 1)
        outputs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
    return [json.loads(out.strip().splitlines()[-1]) for out, _err in outputs]


def replay_at_once(
    r: redis.Redis, redis_url: str, prefix: str, dead_ids: list[str], orders: tuple[str, str], folder: Path
) -> list[dict[str, Any]]:
    """Two processes call ``opslib.moves.replay`` on the same ids at once, in the given orders
    (see :func:`move_at_once`); each returns ``{"replayed": [dead ids], "counts": {status: n}}``."""
    return move_at_once(r, redis_url, prefix, dead_ids, (("replay", orders[0]), ("replay", orders[1])), folder)


LIB_GLOB = "/usr/lib/*/faketime/libfaketime.so.1"


def libfaketime() -> str:
    """The libfaketime library: installed from Debian if missing and possible, else the test is skipped."""
    found = glob.glob(LIB_GLOB)
    if not found and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", "faketime"],
            capture_output=True,
            timeout=240,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
        found = glob.glob(LIB_GLOB)
    if not found:
        pytest.skip("libfaketime (Debian package faketime) is not installed and apt-get could not install it")
    return found[0]
