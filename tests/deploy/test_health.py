"""``python -m worker health`` as a container's HEALTHCHECK runs it: another process beside the worker,
with no WORKER_NAME, finding the worker's heartbeat by this host's name (``<hostname>-<pid>``)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import redis

from tests.helpers import ROOT, Workers, libfaketime, wait_for
from worker.embedded.servers import start_redis
from worker.store.enqueue import enqueue
from worker.store.heartbeats import live_workers
from worker.store.keys import GROUP, Keys
from worker.store.wire import decode_member

KINDS = "tests.deploy.kinds_metrics"


def health(redis_url: str, prefix: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "WORKER_NAME"} | extra
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
    r.zadd(keys.workers, {"elsewhere-7": time.time() + 60})
    assert health(redis_url, prefix).stdout.startswith("unhealthy: no heartbeat of")

    proc = workers.start(KINDS, WORKER_NAME="")  # empty: the default, <hostname>-<pid>
    name = f"{socket.gethostname()}-{proc.pid}"
    wait_for(lambda: name in live_workers(r, keys), what="the worker's heartbeat")
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
    wanted = f"{socket.gethostname()}-*"
    assert gone.stdout.strip() == f"unhealthy: no heartbeat of {wanted} in {keys.workers} in the last 15 s"


def calls(client: redis.Redis) -> Counter[str]:
    """Commands the server has run so far, by command (INFO commandstats)."""
    return Counter(
        {name.removeprefix("cmdstat_"): int(stat["calls"]) for name, stat in client.info("commandstats").items()}
    )


def test_health_sends_a_handful_of_commands_among_a_million_unrelated_keys(tmp_path: Path) -> None:
    server = start_redis(tmp_path / "valkey", extra_args=("--enable-debug-command", "local"))
    try:
        client = redis.Redis.from_url(server.url)
        client.execute_command("DEBUG", "POPULATE", 1_000_000, "unrelated")
        assert client.dbsize() == 1_000_000
        keys = Keys("big:")
        client.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
        client.zadd(keys.workers, {"big-worker": time.time() + 60, "gone-worker": time.time() - 60})
        before = calls(client)
        result = health(server.url, keys.prefix, WORKER_NAME="big-worker")
        ran = calls(client) - before
        ran["info"] -= 1  # the INFO that took `before`
        # commandstats counts a script's own calls too: health's one EVAL reads the live workers, the paused kinds,
        # the throttles (a ZRANGEBYSCORE and two HGETALL inside the server), what is due soon in delayed, the fair
        # jobs waiting (ZCARD), and
        # Redis's TIME (health's "now", and the clock it compares this machine's with).
        inside = {"zrangebyscore": 2, "hgetall": 2, "time": 1, "zcard": 1}
        assert +ran == Counter({"info": 1, "get": 1, "xinfo|groups": 1, "eval": 1, **inside}), ran
        sent = ran.total() - sum(inside.values())
        assert (result.returncode, result.stdout.strip()) == (0, "healthy: 1 worker heartbeat(s) fresh")
        assert sent < 5, f"health sent {sent} commands"
        print(f"health sent {sent} commands with {client.dbsize():,} keys on the server")
        client.close()
    finally:
        server.stop()


def test_health_says_how_many_jobs_wait_for_a_worker_of_which_kind_and_version(
    redis_url: str, r: redis.Redis, keys: Keys, prefix: str, workers: Workers
) -> None:
    # Only an old worker is up: version-2 payloads of send_email and a kind it lacks are handed back to wait.
    workers.start("tests.queue.kinds_versions_old", WORKER_NAME="old-1", BLOCK_MS="100")
    wait_for(lambda: "old-1" in live_workers(r, keys), what="the old worker's heartbeat")
    for i in range(3):
        enqueue(r, "send_email", {"to": f"u{i}@new.example"}, version=2, prefix=prefix)
    enqueue(r, "send_sms", {"phone": "+44"}, version=1, prefix=prefix)
    enqueue(r, "send_email", {"email": "later@old.example"}, delay_s=3600, version=1, prefix=prefix)  # not waiting

    def waiting() -> bool:
        return sum("waiting_since" in decode_member(m) for m in r.zrange(keys.delayed, 0, -1)) == 4

    wait_for(waiting, 30, "four jobs handed back to wait")
    said = health(redis_url, prefix, WORKER_NAME="old-1")
    assert (said.returncode, said.stdout.strip()) == (
        0,
        "healthy: 1 worker heartbeat(s) fresh; waiting for a worker: 3 send_email v2, 1 send_sms v1",
    )


def test_health_warns_when_the_prefix_is_empty(redis_url: str) -> None:
    result = health(redis_url, "")
    assert "warning: QUEUE_PREFIX is empty" in result.stderr
    assert "Traceback" not in result.stderr


def test_health_judges_heartbeats_by_redis_clock_and_says_when_this_machines_is_off(
    redis_url: str, r: redis.Redis, keys: Keys, prefix: str, workers: Workers
) -> None:
    """A worker and its health check on a machine whose clock is 130 s ahead of Redis's (libfaketime): the
    heartbeat is written and read on Redis's clock, so the worker is healthy, and the line says the offset."""
    lib = libfaketime()
    skewed = {"LD_PRELOAD": lib, "FAKETIME": "+130s"}
    workers.start(KINDS, WORKER_NAME="ahead", **skewed)
    wait_for(lambda: "ahead" in live_workers(r, keys), what="the skewed worker's heartbeat, on Redis's clock")
    (score,) = [s for name, s in r.zrange(keys.workers, 0, -1, withscores=True) if name == b"ahead"]
    assert score < r.time()[0] + 20, "the heartbeat's expiry is on Redis's clock, not 130 s ahead"
    said = health(redis_url, prefix, WORKER_NAME="ahead", **skewed)
    assert said.returncode == 0, said.stdout + said.stderr
    # Measured halfway through a TIME round trip: +129.9 as often as +130.0.
    line = r"healthy: 1 worker heartbeat\(s\) fresh; this machine's clock is \+1(29\.9|30\.\d) s off"
    assert re.match(line, said.stdout), said.stdout
    plain = health(redis_url, prefix, WORKER_NAME="ahead")
    assert plain.stdout.strip() == "healthy: 1 worker heartbeat(s) fresh"


def test_health_checks_every_served_queue_and_names_them(
    redis_url: str, r: redis.Redis, prefix: str, workers: Workers
) -> None:
    served = {"WORKER_QUEUES": "critical:6,bulk:1", "WORKER_NAME": "queues-1"}
    r.xgroup_create(Keys(prefix, queue="critical").jobs, GROUP, id="0", mkstream=True)
    missing = health(redis_url, prefix, **served)
    assert missing.stdout.strip() == f"unhealthy: stream {Keys(prefix, queue='bulk').jobs} does not exist yet"
    workers.start(KINDS, **served)
    wait_for(lambda: "queues-1" in live_workers(r, Keys(prefix)), what="the worker's heartbeat")
    healthy = health(redis_url, prefix, **served)
    assert healthy.stdout.strip() == "healthy: 1 worker heartbeat(s) fresh, serving critical:6,bulk:1 (weighted)"
