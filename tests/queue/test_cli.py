"""``python -m worker``: settings, help, enqueue, health and the embedded default."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import redis

from tests.helpers import ROOT, Workers, wait_for
from worker.settings import SETTINGS
from worker.store.heartbeats import live_workers
from worker.store.keys import Keys

KINDS = "tests.queue.kinds_basic"


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_help_lists_every_setting_with_its_default() -> None:
    out = run_cli("--help").stdout
    for setting in SETTINGS.values():
        assert setting.env in out
    assert re.search(r"\n  WORKER_CONCURRENCY +default 8: ", out)  # one aligned table (as wide as its longest name)


def test_without_kinds_the_worker_says_what_to_set_and_exits_2() -> None:
    done = run_cli("--burst", env={"REDIS_URL": "redis://127.0.0.1:1/0", "WORKER_KINDS": ""})
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: no job kinds: set WORKER_KINDS (e.g. WORKER_KINDS=myapp.kinds) or pass --kinds"
    )


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"WORKER_CONCURRENCY": "0"}, "WORKER_CONCURRENCY='0' must be >= 1"),
        ({"WORKER_CONCURRENCY": "eight"}, "WORKER_CONCURRENCY='eight' is not an integer"),
        ({"REDIS_URL": "localhost:6379"}, "REDIS_URL='localhost:6379' is not a URL"),
        ({"DATABASE_URL": "mysql://x"}, "DATABASE_URL='mysql://x' is not a URL"),
        ({"SCHEDULE_TZ": "Mars/Olympus"}, "SCHEDULE_TZ='Mars/Olympus' is not a known time zone"),
        ({"LOG_FORMAT": "xml"}, "LOG_FORMAT='xml' is not one of: text, json"),
        ({"WORKER_KINDS": "no_such_module_xyz"}, "cannot import 'no_such_module_xyz'"),
    ],
)
def test_a_bad_setting_exits_2_with_one_line_naming_it(env: dict[str, str], named: str) -> None:
    done = run_cli("--burst", env={"REDIS_URL": "redis://127.0.0.1:1/0", **env})
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert named in lines[0]


def test_enqueue_command_adds_now_or_later(r: redis.Redis, keys: Keys, redis_url: str) -> None:
    env = {"REDIS_URL": redis_url, "QUEUE_PREFIX": keys.prefix, "WORKER_KINDS": "stagedoor.kinds"}
    now = run_cli("enqueue", "send_email", "order_id=4471", "email=a@b.c", "--queue", "default", env=env)
    assert now.returncode == 0, now.stderr
    [(entry_id, fields)] = r.xrange(keys.jobs)
    assert now.stdout.strip() == entry_id.decode()
    assert fields[b"kind"] == b"send_email"
    assert fields[b"order_id"] == b"4471"
    assert fields[b"attempts"] == b"0"
    assert len(fields[b"job_id"]) == 32

    before = time.time()
    later = run_cli("enqueue", "send_reminder", "order_id=1", "--delay", "2m", "--queue", "default", env=env)
    assert later.returncode == 0, later.stderr
    member = later.stdout.strip()
    assert json.loads(member)["kind"] == "send_reminder"
    assert before + 120 <= r.zscore(keys.delayed, member) <= time.time() + 120

    at = run_cli("enqueue", "send_reminder", "--at", "2030-01-01T03:00:00+01:00", "--queue", "default", env=env)
    assert r.zscore(keys.delayed, at.stdout.strip()) == 1893463200.0
    critical = Keys(keys.prefix, queue="critical")  # without --queue: the kind's declared queue
    declared = run_cli("enqueue", "send_email", "order_id=4472", "email=a@b.c", env=env)
    assert [entry_id.decode() for entry_id, _ in r.xrange(critical.jobs)] == [declared.stdout.strip()]
    bad = run_cli("enqueue", "send_email", "--queue", "Critical!", env=env)
    assert bad.returncode == 2 and "is not a queue name" in bad.stderr

    fair = run_cli("enqueue", "send_email", "order_id=9", "--fair-key", "org-17", env=env)
    assert fair.returncode == 0, fair.stderr
    [member] = r.zrange(critical.fair_queue, 0, -1)  # send_email's queue
    assert json.loads(member)["fair_key"] == "org-17" and json.loads(member)["job_id"] == fair.stdout.strip()


def test_enqueue_command_takes_a_unique_key_and_a_job_id(r: redis.Redis, keys: Keys, redis_url: str) -> None:
    env = {"REDIS_URL": redis_url, "QUEUE_PREFIX": keys.prefix, "WORKER_KINDS": "stagedoor.kinds"}
    keyed = ["enqueue", "send_email", "order_id=4471", "--unique-key", "o4471", "--unique-for", "1h"]
    first, again = run_cli(*keyed, env=env), run_cli(*keyed, env=env)
    assert first.returncode == again.returncode == 0, first.stderr
    critical = Keys(keys.prefix, queue="critical")  # send_email's queue: its jobs and its unique keys
    assert first.stdout == again.stdout and r.xlen(critical.jobs) == 1
    assert int(r.hget(critical.unique("send_email", "o4471"), "until") or 0) > time.time() * 1000 + 3500_000
    named = [run_cli("enqueue", "send_email", "--job-id", "m1", env=env).stdout for _ in range(2)]
    assert named[0] == named[1] and r.xlen(critical.jobs) == 2


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["enqueue", "k", "novalue"], "'novalue' is not key=value"),
        (["enqueue", "k", "--delay", "soon"], "--delay 'soon' is not a duration"),
        (["enqueue", "k", "--at", "tomorrow"], "--at 'tomorrow' is not ISO-8601"),
        (["enqueue", "k", "--at", "2030-01-01T03:00:00"], "has no UTC offset"),
        (["enqueue", "k", "--unique-key", "a", "--unique-for", "a day"], "--unique-for 'a day' is not a duration"),
    ],
)
def test_enqueue_command_refuses_bad_arguments(args: list[str], named: str, redis_url: str, keys: Keys) -> None:
    done = run_cli(*args, env={"REDIS_URL": redis_url, "QUEUE_PREFIX": keys.prefix})
    assert done.returncode == 2
    assert named in done.stderr


def test_health_reports_healthy_only_with_a_fresh_heartbeat(
    r: redis.Redis, keys: Keys, redis_url: str, workers: Workers
) -> None:
    env = {"REDIS_URL": redis_url, "QUEUE_PREFIX": keys.prefix, "WORKER_NAME": "health-probe"}
    missing = run_cli("health", env=env)
    assert missing.returncode == 1
    assert missing.stdout.startswith("unhealthy: stream")
    proc = workers.start(KINDS, WORKER_NAME="health-probe")
    wait_for(lambda: "health-probe" in live_workers(r, keys), what="the heartbeat")
    healthy = run_cli("health", env=env)
    assert (healthy.returncode, healthy.stdout.split(":")[0]) == (0, "healthy")
    proc.terminate()
    assert proc.wait(30) == 0
    gone = run_cli("health", env=env)
    assert gone.returncode == 1
    assert "no heartbeat" in gone.stdout
    down = run_cli("health", env={**env, "REDIS_URL": "redis://127.0.0.1:1/0"})
    assert down.returncode == 1
    assert down.stdout.startswith("unhealthy: Redis does not answer")


def descendants_until_exit(proc: subprocess.Popen[bytes], timeout_s: float = 60) -> dict[psutil.Process, str]:
    """Every process ``proc`` started (its children and theirs), with its name, seen while it ran: polled
    until it exits. Only these are the worker's: other test runs on the machine start servers of their own."""
    seen: dict[psutil.Process, str] = {}
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        for child in parent.children(recursive=True) if parent.is_running() else ():
            with contextlib.suppress(psutil.NoSuchProcess):
                seen[child] = child.name()  # read again each time: a child first seen between fork and exec is "python"
        time.sleep(0.005)  # the sampling interval, not a wait for an event: the loop ends when the worker exits
    return seen


def test_without_redis_url_the_worker_starts_and_stops_its_own_server(tmp_path: Path) -> None:
    # No server URL at all (ARCHIVE_URL neither): the development path starts the embedded servers.
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL", "ARCHIVE_URL")}
    env.update({"PYTHONPATH": str(ROOT), "WORKER_DATA_DIR": str(tmp_path), "WORKER_KINDS": KINDS})
    log = tmp_path / "worker.log"
    with (
        log.open("w") as out,
        subprocess.Popen(
            [sys.executable, "-m", "worker", "--burst"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=out
        ) as proc,
    ):
        try:
            started = descendants_until_exit(proc)
            proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
    stderr = log.read_text()
    assert proc.returncode == 0, stderr
    assert "started the embedded Valkey at redis://127.0.0.1:" in stderr
    assert "Burst mode: the queue is drained" in stderr
    assert "valkey-server" in started.values(), f"the worker's own Valkey was never seen among {started}"
    assert not [child.pid for child in started if child.is_running()]  # nothing left behind
    assert not (tmp_path / "stack.json").exists()
