"""A bad network between the workers and Redis: a TCP proxy of the tests' own (:mod:`tests.faults.helpers_proxy`)
delays, freezes (half-open connections) and resets (RST) the workers' connections while they run jobs that
succeed, retry once and die (:mod:`tests.faults.kinds_refusals`; the handlers count their runs on another
server, which the proxy never touches).

- Resets every 0.5-3 s at random for ``NETWORK_EPISODE_S`` (12 s in ``make test``, 90 s in
  ``make fault-network-90``) with two workers and jobs enqueued at about 40 a second: no worker dies, every
  job reaches its designed outcome, no decided outcome is dropped (no "Could not record the outcome"),
  and jobs that ran again are counted and bounded by what was in flight at the resets.
- The archive's PostgreSQL frozen (SIGSTOP): SIGTERM exits 0 within the grace and a few seconds.
- A handler that blocks the event loop 10 s (``time.sleep`` in an ``async def``) with a 3 s
  ``RECLAIM_IDLE_MS``: the watchdog keeps its claim, so it runs once, and the log names it.
- A freeze that leaves the old connections open but unanswered (a load balancer that forgot them): the
  worker sees it within 10 s (its own socket timeout, whatever redis-py's default) and runs new jobs once
  the network passes again; SIGTERM during the freeze exits within the grace.

Each prints its recovery time (docs/reliability.md, "When the network misbehaves").
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import psutil
import pytest
import redis

from tests.faults.helpers import archived
from tests.faults.helpers_proxy import Proxy
from tests.faults.test_redis_refuses import DESIGN, assert_designed, runs, settled
from tests.faults.test_redis_refuses import counting as counting  # the fixture, shared
from tests.helpers import Workers, wait_for
from worker.archive.table import migrate_url
from worker.cli.stop_deadline import STOP_EXTRA_S
from worker.embedded.servers import EmbeddedServer, start_postgres, start_redis
from worker.store.heartbeats import live_workers
from worker.store.keys import GROUP, Keys

KINDS = "tests.faults.kinds_refusals"
EPISODE_S = float(os.environ.get("NETWORK_EPISODE_S", "12"))
RATE_PER_S = 40
DETECT_S = 10.0
GRACE_S = 3.0
#: Reclaim after 3 s idle: an entry whose XREADGROUP reply a reset lost comes back within seconds.
SETTINGS = {"RECLAIM_IDLE_MS": "3000", "RECLAIM_INTERVAL_S": "0.5", "SHUTDOWN_GRACE_S": str(GRACE_S)}
LOST = re.compile(r"Lost the connection to Redis|lost its connection")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[EmbeddedServer]:
    """The queue's Redis, private to the test (the proxy stands before it)."""
    started = start_redis(tmp_path / "queue")
    yield started
    started.stop()


@pytest.fixture
def proxy(server: EmbeddedServer) -> Iterator[Proxy]:
    port = urlparse(server.url).port
    assert port is not None
    started = Proxy(port)
    yield started
    started.stop()


def test_the_proxy_resets_freezes_and_passes_again(proxy: Proxy) -> None:
    """The proxy itself: a reset is an RST at the client, a freeze a silence, a thaw passes new connections."""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as conn:
        conn.sendall(b"PING\r\n")
        assert conn.recv(100) == b"+PONG\r\n"
        wait_for(lambda: proxy.links, 5, "the link")
        assert proxy.reset() == 1
        with pytest.raises(ConnectionResetError):
            conn.sendall(b"PING\r\n")
            conn.recv(100)
    proxy.freeze()
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=0.5) as conn:
        conn.sendall(b"PING\r\n")
        with pytest.raises(TimeoutError):
            conn.recv(100)
        proxy.thaw()
        with pytest.raises(TimeoutError):
            conn.recv(100)  # a frozen connection stays dead
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as conn:
        conn.sendall(b"PING\r\n")
        assert conn.recv(100) == b"+PONG\r\n"


def enqueue_design(client: redis.Redis, keys: Keys, deadline_s: float | None) -> dict[str, str]:
    """The design's kinds 3:3:1 (job ids ``<kind>-j<n>``), interleaved: ``RATE_PER_S`` a second over
    ``deadline_s`` when given, else the design's 700 at once. Job id -> kind."""
    mix = ["succeed", "fail_once"] * 3 + ["always_fail"]
    total = int(RATE_PER_S * deadline_s) if deadline_s is not None else sum(count for count, _ in DESIGN.values())
    order = [(mix[n % len(mix)], n) for n in range(total)]
    kinds: dict[str, str] = {}
    started = time.monotonic()
    for index, (kind, n) in enumerate(order):
        if deadline_s is not None:
            ahead_s = started + index / RATE_PER_S - time.monotonic()
            if ahead_s > 0:
                time.sleep(ahead_s)  # pacing the producer, not waiting for an outcome
        job_id = f"{kind}-j{n}"
        kinds[job_id] = kind
        client.xadd(keys.jobs, {"kind": kind, "job_id": job_id, "attempts": "0"})
    return kinds


def start_workers(workers: Workers, count: int, counting: EmbeddedServer, **extra: str) -> list[subprocess.Popen[str]]:
    return [
        workers.start(KINDS, log_name=f"net-{i}.log", COUNT_REDIS_URL=counting.url, **SETTINGS, **extra)
        for i in range(count)
    ]


def make_group(client: redis.Redis, keys: Keys) -> None:
    client.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)


@contextlib.contextmanager
def behind_proxy(
    server: EmbeddedServer, counting: EmbeddedServer, proxy: Proxy, prefix: str, tmp_path: Path
) -> Iterator[tuple[redis.Redis, redis.Redis, Keys, Workers]]:
    """The queue's client and the counter (both straight to their servers), the keys with the group made, and
    a pool of workers whose Redis is the proxy; everything closed and stopped after."""
    client = redis.Redis.from_url(server.url)
    counter = redis.Redis.from_url(counting.url)
    keys = Keys(prefix)
    make_group(client, keys)
    workers = Workers(proxy.url, prefix, tmp_path)
    try:
        yield client, counter, keys, workers
    finally:
        proxy.thaw()
        workers.stop_all()
        client.close()
        counter.close()


def test_resets_at_random_kill_no_worker_and_drop_no_outcome(
    server: EmbeddedServer, counting: EmbeddedServer, proxy: Proxy, prefix: str, tmp_path: Path
) -> None:
    with behind_proxy(server, counting, proxy, prefix, tmp_path) as (client, counter, keys, workers):
        procs = start_workers(workers, 2, counting)
        rng = random.Random(28)
        resets: list[float] = []
        stop_at = time.monotonic() + EPISODE_S
        next_reset = time.monotonic() + rng.uniform(0.5, 3.0)
        # The producer enqueues while this thread resets: one paces, the other cuts.
        kinds: dict[str, str] = {}
        producer = threading.Thread(target=lambda: kinds.update(enqueue_design(client, keys, EPISODE_S)))
        producer.start()
        while time.monotonic() < stop_at:
            wait_s = min(next_reset, stop_at) - time.monotonic()
            if wait_s > 0:
                time.sleep(wait_s)  # the fault's schedule: a reset every 0.5-3 s
            if time.monotonic() >= next_reset:
                resets.append(time.monotonic())
                proxy.reset()
                next_reset = time.monotonic() + rng.uniform(0.5, 3.0)
        producer.join(EPISODE_S + 30)
        ended = time.monotonic()
        wait_for(lambda: settled(client, keys), 30, "every job's outcome after the resets")
        recovery_s = time.monotonic() - ended
        for proc in procs:
            assert proc.poll() is None, f"a worker died:\n{Workers.log(proc)}"
        assert_designed(client, counter, keys, kinds, exact=False)
        counted = runs(counter, prefix)
        reruns = sum(counted[job] - DESIGN[kind][1] for job, kind in kinds.items())
        concurrency = 8
        assert reruns <= len(resets) * concurrency, (reruns, len(resets))
        logs = [Workers.log(proc) for proc in procs]
        for log in logs:
            assert "Could not record the outcome" not in log, log
            assert "Traceback" not in log, log
        assert "poison" not in str(client.xrange(keys.dead))
        print(
            f"\nresets every 0.5-3 s for {EPISODE_S:g} s: {len(resets)} resets, {len(kinds)} jobs, 0 worker deaths, "
            f"0 outcomes dropped, {reruns} jobs ran again; every outcome recorded {recovery_s:.1f} s after the "
            "last reset window"
        )
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            assert proc.wait(GRACE_S + 10) == 0, Workers.log(proc)


def line_at(proc: subprocess.Popen[str], pattern: re.Pattern[str], timeout_s: float) -> float:
    """When (monotonic) a line matching ``pattern`` showed in the worker's log beyond those there now,
    polled every 50 ms up to ``timeout_s``."""
    before = len(pattern.findall(Workers.log(proc)))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(pattern.findall(Workers.log(proc))) > before:
            return time.monotonic()
        time.sleep(0.05)  # polling a log file with a deadline
    pytest.fail(f"no line matching {pattern.pattern!r} within {timeout_s} s:\n{Workers.log(proc)}")


def test_a_half_open_freeze_is_seen_within_10_s_and_new_jobs_run_after(
    server: EmbeddedServer, counting: EmbeddedServer, proxy: Proxy, prefix: str, tmp_path: Path
) -> None:
    with behind_proxy(server, counting, proxy, prefix, tmp_path) as (client, counter, keys, workers):
        [proc] = start_workers(workers, 1, counting)
        client.xadd(keys.jobs, {"kind": "succeed", "job_id": "before", "attempts": "0"})
        wait_for(lambda: runs(counter, prefix).get("before") == 1 and settled(client, keys), 30, "the first job")
        frozen_at = time.monotonic()
        proxy.freeze()
        seen_s = line_at(proc, LOST, 20) - frozen_at
        assert seen_s < DETECT_S, f"the freeze was seen after {seen_s:.1f} s"
        proxy.thaw()
        thawed_at = time.monotonic()
        client.xadd(keys.jobs, {"kind": "succeed", "job_id": "after", "attempts": "0"})
        wait_for(lambda: runs(counter, prefix).get("after") == 1 and settled(client, keys), 30, "a job after")
        resumed_s = time.monotonic() - thawed_at
        assert proc.poll() is None
        print(f"\nhalf-open freeze: seen after {seen_s:.1f} s, a new job done {resumed_s:.1f} s after the thaw")
        proxy.freeze()  # SIGTERM while frozen still exits within the grace
        line_at(proc, LOST, 20)
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        proc.wait(GRACE_S + 15)
        print(f"SIGTERM while frozen: exited {proc.returncode} after {time.monotonic() - sent:.1f} s")
        assert time.monotonic() - sent < GRACE_S + 10


def test_sigterm_exits_within_the_grace_with_postgresql_frozen(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers, counting: EmbeddedServer
) -> None:
    """The archive's PostgreSQL stopped (SIGSTOP: connections open, nothing answers) while dead letters
    wait to be archived: SIGTERM still exits 0 within SHUTDOWN_GRACE_S and a few seconds."""
    pg_dir = Path(tempfile.mkdtemp(prefix="stagedoor-network-pg-"))  # not under tmp_path: see test_postgres_outage
    server = start_postgres(pg_dir)
    frozen: list[psutil.Process] = []
    try:
        migrate_url(server.url)
        proc = workers.start(KINDS, ARCHIVE_URL=server.url, COUNT_REDIS_URL=counting.url, **SETTINGS)
        for n in range(20):
            r.xadd(keys.jobs, {"kind": "always_fail", "job_id": f"dead-{n}", "attempts": "0"})
        wait_for(lambda: archived(server.url, prefix)[0] >= 1, 60, "a first dead letter archived")
        postmaster = psutil.Process(server.process.pid)
        frozen = [postmaster, *postmaster.children(recursive=True)]
        for process in frozen:
            with contextlib.suppress(psutil.NoSuchProcess):  # a backend that ended since: nothing to freeze
                process.suspend()
        for n in range(20, 40):
            r.xadd(keys.jobs, {"kind": "always_fail", "job_id": f"dead-{n}", "attempts": "0"})
        wait_for(lambda: r.xlen(keys.dead) >= 30, 60, "dead letters waiting for the frozen archive")
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        code = proc.wait(GRACE_S + STOP_EXTRA_S + 20)
        took_s = time.monotonic() - sent
        print(f"\nSIGTERM with PostgreSQL frozen: exited {code} after {took_s:.1f} s (grace {GRACE_S:g} s)")
        assert code == 0, Workers.log(proc)
        assert took_s < GRACE_S + STOP_EXTRA_S + 3, Workers.log(proc)
    finally:
        for process in frozen:
            with contextlib.suppress(psutil.Error):
                process.resume()
        server.stop()
        shutil.rmtree(pg_dir, ignore_errors=True)


def test_a_loop_blocked_10_s_keeps_its_job_and_is_named_in_the_log(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers, counting: EmbeddedServer
) -> None:
    """An async handler that calls time.sleep(10), with RECLAIM_IDLE_MS=3000 and another worker reclaiming
    every 0.5 s: the watchdog keeps the claim fresh, so the job runs once; its log names the kind and job."""
    make_group(r, keys)
    extra = {**SETTINGS, "COUNT_REDIS_URL": counting.url, "BLOCK_S": "10"}
    blocked = workers.start("tests.faults.kinds_network", log_name="blocked.log", WORKER_NAME="blocked", **extra)
    other = workers.start("tests.faults.kinds_network", log_name="other.log", WORKER_NAME="other", **extra)
    counter = redis.Redis.from_url(counting.url)
    try:
        wait_for(lambda: {"blocked", "other"} <= live_workers(r, keys), 60, "both workers")
        r.xadd(keys.jobs, {"kind": "block_loop", "job_id": "sleeper", "attempts": "0"})
        key = f"{prefix}network:runs"
        wait_for(lambda: counter.hget(key, "sleeper"), 30, "the blocking job to start")
        wait_for(lambda: settled(r, keys), 40, "the blocking job's outcome")
        assert counter.hget(key, "sleeper") == b"1", "a blocked loop's job was taken and ran again"
        ran = next(p for p in (blocked, other) if "event loop is blocked" in Workers.log(p))
        wait_for(lambda: "The event loop ran again after" in Workers.log(ran), 10, "the watchdog's end line")
        [line] = [line for line in Workers.log(ran).splitlines() if "event loop is blocked" in line]
        assert "kind block_loop job sleeper" in line, line
        assert "Reclaimed entry" not in Workers.log(blocked) + Workers.log(other)
        print(f"\nblocked loop: {line.split('WARNING', 1)[-1].strip()[:160]}")
    finally:
        counter.close()
