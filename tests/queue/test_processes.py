"""``WORKER_PROCESSES=N``: a supervisor with N worker processes sharing the queue."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.request

import psutil
import pytest
import redis

from tests.helpers import ROOT, Workers, wait_for
from worker.embedded.servers import free_port
from worker.store.enqueue import enqueue
from worker.store.heartbeats import live_workers
from worker.store.keys import GROUP, Keys

KINDS = "tests.queue.kinds_processes,tests.queue.kinds_basic"


def tkey(keys: Keys, name: str) -> str:
    return f"{keys.prefix}test:{name}"


def children(proc: subprocess.Popen[str]) -> list[psutil.Process]:
    return [c for c in psutil.Process(proc.pid).children() if "worker" in " ".join(c.cmdline())]


def health(workers: Workers, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker", "health"],
        cwd=ROOT,
        env=workers.env(KINDS, **env),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def no_orphans(workers: Workers):
    """After the test: no worker process of the test's supervisors is left running."""
    seen: list[psutil.Process] = []
    yield seen
    workers.stop_all()
    _gone, alive = psutil.wait_procs(seen, timeout=15)
    for proc in alive:
        proc.kill()
    assert not alive, f"worker processes outlived their supervisor: {[p.pid for p in alive]}"


def test_two_processes_share_the_queue_and_the_burst_ends_when_both_drained(
    r: redis.Redis, keys: Keys, workers: Workers
) -> None:
    ids = [enqueue(r, "meet", {"n": "2"}, prefix=keys.prefix) for _ in range(40)]
    done = workers.burst(KINDS, timeout_s=90, WORKER_PROCESSES="2", WORKER_CONCURRENCY="1")
    assert r.scard(tkey(keys, "pids")) == 2, done.stdout
    assert r.scard(tkey(keys, "done")) == len(ids)
    assert r.xpending(keys.jobs, GROUP)["pending"] == 0
    consumers = {c["name"].decode() for c in r.xinfo_consumers(keys.jobs, GROUP)}
    assert len(consumers) == 2 and all(name.rsplit("-", 1)[1] in {"0", "1"} for name in consumers)


def test_a_dead_process_is_restarted_and_health_covers_every_process(
    r: redis.Redis, keys: Keys, workers: Workers, no_orphans: list[psutil.Process]
) -> None:
    sup = workers.start(KINDS, "--processes", "2", WORKER_NAME="sup")
    wait_for(lambda: {"sup-0", "sup-1"} <= live_workers(r, keys), what="both heartbeats")
    first = {c.pid: c for c in children(sup)}
    no_orphans.extend(first.values())
    assert len(first) == 2
    assert health(workers, WORKER_NAME="sup", WORKER_PROCESSES="2").returncode == 0

    victim = next(iter(first.values()))
    victim.kill()
    victim.wait(10)

    def replaced() -> bool:
        now = children(sup)
        no_orphans.extend(c for c in now if c.pid not in first)
        return len(now) == 2 and victim.pid not in {c.pid for c in now}

    wait_for(replaced, timeout_s=30, what="the killed process's replacement")
    assert "restarting it in" in Workers.log(sup)
    ids = [enqueue(r, "noop", {}, prefix=keys.prefix) for _ in range(20)]
    wait_for(lambda: r.scard(tkey(keys, "done")) == len(ids), what="jobs run after the restart")

    sup.send_signal(signal.SIGTERM)
    assert sup.wait(40) == 0


def test_sigterm_lets_every_process_finish_its_running_jobs(
    r: redis.Redis, keys: Keys, workers: Workers, no_orphans: list[psutil.Process]
) -> None:
    sup = workers.start(KINDS, "--processes", "2", WORKER_NAME="drain", WORKER_CONCURRENCY="2", SHUTDOWN_GRACE_S="20")
    wait_for(lambda: {"drain-0", "drain-1"} <= live_workers(r, keys), what="both heartbeats")
    no_orphans.extend(children(sup))
    ids = [enqueue(r, "slow", {"s": "1.5"}, prefix=keys.prefix) for _ in range(4)]
    wait_for(lambda: r.scard(tkey(keys, "running")) == 4, what="four jobs running in two processes")
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(40) == 0
    assert r.scard(tkey(keys, "done")) == len(ids)
    assert r.xpending(keys.jobs, GROUP)["pending"] == 0
    assert "stopping 2 worker processes" in Workers.log(sup)


def test_one_metrics_endpoint_covers_every_process(
    r: redis.Redis, keys: Keys, workers: Workers, no_orphans: list[psutil.Process]
) -> None:
    port = free_port()
    sup = workers.start(KINDS, "--processes", "2", WORKER_NAME="metrics", METRICS_PORT=str(port))
    wait_for(lambda: {"metrics-0", "metrics-1"} <= live_workers(r, keys), what="both heartbeats")
    no_orphans.extend(children(sup))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def scrape_with_both() -> str:
        with opener.open(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
        return text if 'process="0"' in text and 'process="1"' in text else ""

    text = str(wait_for(scrape_with_both, what="the series of both processes"))
    assert "worker_worker_processes 2.0" in text
    assert "worker_worker_restarts_total 0.0" in text
    for index in ("0", "1"):
        assert f'process_cpu_seconds_total{{process="{index}"}}' in text
    assert text.count("# TYPE process_cpu_seconds_total counter") == 1, "one family, many processes"
