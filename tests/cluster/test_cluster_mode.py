"""Cluster mode with one partition: any node's URL works for every tool; bad set-ups are refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
import redis.cluster

import worker
from tests.helpers import ROOT, Workers
from worker.embedded.cluster import LocalCluster, cluster_port
from worker.embedded.servers import start_redis
from worker.store.keys import Keys

KINDS = "tests.cluster.kinds_cluster"


def run(module: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "WORKER_KINDS": KINDS, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_clean(output: str) -> None:
    """No redirection or cross-slot error escaped, and nothing crashed."""
    for bad in ("MOVED", "ASK ", "CROSSSLOT", "Traceback", "do not hash to the same slot"):
        assert bad not in output, output


def owner_port(cr: redis.cluster.RedisCluster, key: str) -> int:
    return int(cr.get_node_from_key(key).port)


def test_connect_asks_the_server_and_returns_the_matching_client(
    node_urls: list[str], redis_url: str, tagged_prefix: str
) -> None:
    settings = worker.settings.Settings.from_env({"QUEUE_PREFIX": tagged_prefix})
    for url in node_urls:
        client = worker.connect(settings, url=url)
        assert isinstance(client, redis.cluster.RedisCluster)
        client.close()
    single = worker.connect(settings, url=redis_url)
    assert type(single) is redis.Redis
    single.close()


def test_every_tool_works_from_a_node_that_does_not_own_the_queue(
    cr: redis.cluster.RedisCluster, node_urls: list[str], tagged_prefix: str, cluster_workers: Workers
) -> None:
    keys = Keys(tagged_prefix)
    owner = owner_port(cr, keys.jobs)
    elsewhere = [u for u in node_urls if not u.endswith(f":{owner}/0")]
    env = {"REDIS_URL": elsewhere[0], "QUEUE_PREFIX": tagged_prefix}
    for i in range(5):
        done = run("worker", "enqueue", "noop", f"order_id={i}", env=env)
        assert done.returncode == 0, done.stderr
    later = run("worker", "enqueue", "noop", "order_id=later", "--delay", "0.2", env=env)
    assert later.returncode == 0, later.stderr
    worker.enqueue(cr, "flaky", {"order_id": "f"}, prefix=tagged_prefix)
    cluster_workers.redis_url = elsewhere[-1]
    out = cluster_workers.burst(KINDS).stdout
    assert_clean(out)
    assert cr.scard(f"{tagged_prefix}test:done") == 7
    stats = run("opslib", "stats", env=env)
    assert stats.returncode == 0, stats.stderr
    assert_clean(stats.stdout + stats.stderr)
    health_env = {**env, "WORKER_NAME": "nobody"}
    assert run("worker", "health", env=health_env).returncode == 1
    # Healthy on a cluster too, naming what waits for a worker (read from delayed apart from the script).
    cr.zadd(keys.workers, {"somebody": time.time() + 60})
    waiting = {"kind": "send_sms", "v": "2", "waiting_since": repr(time.time()), "handed_back": "1"}
    cr.zadd(keys.delayed, {json.dumps(waiting, sort_keys=True, separators=(",", ":")): time.time() + 5})
    said = run("worker", "health", env={**env, "WORKER_NAME": "somebody"})
    assert said.stdout.strip() == "healthy: 1 worker heartbeat(s) fresh; waiting for a worker: 1 send_sms v2"


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"REDIS_MODE": "single"}, "names a Redis Cluster node but REDIS_MODE=single"),
        ({"QUEUE_PREFIX": "plain:"}, "QUEUE_PREFIX='plain:' has no hash tag"),
    ],
)
@pytest.mark.parametrize("command", [("--burst",), ("enqueue", "noop")])
def test_a_cluster_the_settings_rule_out_exits_2_in_one_line(
    cluster: LocalCluster, tagged_prefix: str, env: dict[str, str], named: str, command: tuple[str, ...]
) -> None:
    done = run("worker", *command, env={"REDIS_URL": cluster.url, "QUEUE_PREFIX": tagged_prefix, **env})
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], done.stderr


def test_a_single_server_while_redis_mode_says_cluster_exits_2(redis_url: str) -> None:
    done = run("worker", "--burst", env={"REDIS_URL": redis_url, "REDIS_MODE": "cluster"})
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert "names a single server (cluster_enabled:0) but REDIS_MODE=cluster" in line


def test_a_cluster_that_does_not_serve_every_slot_exits_1_before_starting(tmp_path: Path) -> None:
    folder = (tmp_path / "lonely").resolve()
    args = ("--cluster-enabled", "yes", "--cluster-config-file", str(folder / "nodes.conf"))
    node = start_redis(folder, port=cluster_port(set()), extra_args=args)
    try:
        url = node.url
        with redis.Redis.from_url(url) as c:
            c.execute_command("CLUSTER ADDSLOTSRANGE", 0, 8000)
        for command in (("--burst",), ("enqueue", "noop")):
            done = run("worker", *command, env={"REDIS_URL": url, "QUEUE_PREFIX": "{q}:"})
            assert done.returncode == 1, done.stderr
            [line] = done.stderr.strip().splitlines()
            assert "is not serving every slot (cluster_state:fail, 8001 of 16384 slots ok)" in line
            assert "started" not in done.stdout
    finally:
        node.stop()
