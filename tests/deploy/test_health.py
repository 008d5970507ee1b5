"""``python -m worker health`` as a container's HEALTHCHECK runs it: another process beside the worker,
with no WORKER_NAME, finding the worker's heartbeat by this host's name (``<hostname>-<pid>``)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import redis

from tests.helpers import ROOT, Workers, wait_for
from worker.store.keys import GROUP, Keys

KINDS = "tests.deploy.kinds_metrics"


def health(redis_url: str, prefix: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "WORKER_NAME"}
    return subprocess.run(
        [sys.executable, "-m", "worker", "health"],
        cwd=ROOT,
        env={**env, "REDIS_URL": redis_url, "QUEUE_PREFIX": prefix, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_health_finds_this_hosts_worker_and_not_another_hosts(
    redis_url: str, r: redis.Redis, keys: Keys, prefix: str, workers: Workers
) -> None:
    # A worker of another host, alive: it must not make this host look healthy.
    r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
    r.xreadgroup(GROUP, "elsewhere-7", {keys.jobs: ">"}, count=1)
    r.set(keys.heartbeat("elsewhere-7"), "{}", ex=60)
    assert health(redis_url, prefix).stdout.startswith("unhealthy: no heartbeat matching")

    proc = workers.start(KINDS, WORKER_NAME="")  # empty: the default, <hostname>-<pid>
    name = f"{socket.gethostname()}-{proc.pid}"
    wait_for(lambda: r.exists(keys.heartbeat(name)), what="the worker's heartbeat")
    healthy = health(redis_url, prefix)
    assert (healthy.returncode, healthy.stdout.strip()) == (0, "healthy: 1 worker heartbeat(s) fresh")
    since = "2026-11-30T21:40:00+00:00"
    r.hset(keys.paused, "render_tickets", json.dumps({"since": since, "by": "ana", "reason": "seat map fix"}))
    r.hset(keys.throttles, "send_email", json.dumps({"per_s": 10.0}))
    said = health(redis_url, prefix).stdout.strip()
    assert said == (
        f"healthy: 1 worker heartbeat(s) fresh; paused: render_tickets since {since} by ana (seat map fix); "
        "throttled: send_email 10.0/s"
    )

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0  # its goodbye deletes the heartbeat
    gone = health(redis_url, prefix)
    assert gone.returncode == 1
    pattern = keys.heartbeat(f"{socket.gethostname()}-*")
    assert gone.stdout.strip() == f"unhealthy: no heartbeat matching {pattern} in the last 15 s"
