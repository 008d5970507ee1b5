"""Redis refuses writes for a while (``maxmemory`` reached, or ``MISCONF``: a snapshot that cannot be written
with ``stop-writes-on-bgsave-error yes``) while one worker runs 700 jobs: 300 that succeed, 300 that fail once
and succeed on their retry, 100 that always fail (one retry, then dead-lettered as exhausted). The handlers
count their runs on another server, so only the worker's own moves meet the refusing one.

Each test runs on a private valkey-server it starts (never the shared one: it is reconfigured), and checks:
within 10 s of the server accepting writes again every job has exactly its designed outcome, no handler ran
more often than designed, nothing is dead-lettered as poison, and the worker's log holds one WARNING for the
episode and one INFO at its end. SIGTERM during an episode: the worker exits within its grace period, and a
new worker finishes everything once the server accepts writes.

The 60 s episode runs only with ``REFUSAL_EPISODE_S=60`` (``make fault-episode-60``); its recovery time goes in
docs/reliability.md.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import worker
from tests.faults.kinds_refusals import runs_key
from tests.helpers import Workers, wait_for
from worker.embedded.servers import EmbeddedServer, start_redis
from worker.errors import QueueRefused
from worker.store.keys import GROUP, Keys

KINDS = "tests.faults.kinds_refusals"
DESIGN = {"succeed": (300, 1), "fail_once": (300, 2), "always_fail": (100, 2)}
"""kind -> (jobs, runs each)."""
EPISODE_S = float(os.environ.get("REFUSAL_EPISODE_S", "6"))
RECOVERY_S = 10.0
STARTED = "Redis refuses writes"
ENDED = "Redis accepts writes again"
GRACE_S = 3.0


@pytest.fixture
def refusing(tmp_path: Path) -> Iterator[EmbeddedServer]:
    """A private server whose persistence settings a test may change (protected configs enabled)."""
    server = start_redis(tmp_path / "refusing", extra_args=("--enable-protected-configs", "yes"))
    yield server
    server.stop()


@pytest.fixture
def counting(tmp_path: Path) -> Iterator[EmbeddedServer]:
    """The server the handlers count their runs on."""
    server = start_redis(tmp_path / "counting")
    yield server
    server.stop()


def enqueue_many_mixed(client: redis.Redis, keys: Keys) -> dict[str, str]:
    """Add the design's jobs interleaved (job ids ``<kind>-j<n>``); job id -> kind."""
    kinds: dict[str, str] = {}
    pipe = client.pipeline(transaction=False)
    order = [(kind, n) for kind, (count, _runs) in DESIGN.items() for n in range(count)]
    order.sort(key=lambda pair: (pair[1] % 7, pair[1], pair[0]))
    for kind, n in order:
        job_id = f"{kind}-j{n}"
        kinds[job_id] = kind
        pipe.xadd(keys.jobs, {"kind": kind, "job_id": job_id, "attempts": "0"})
    pipe.execute()
    return kinds


def runs(counter: redis.Redis, prefix: str) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in counter.hgetall(runs_key(prefix)).items()}


def settled(client: redis.Redis, keys: Keys) -> bool:
    """Nothing pending, delayed or undelivered: every job has its outcome."""
    group = next(g for g in client.xinfo_groups(keys.jobs) if g["name"] in (GROUP, GROUP.encode()))
    stream = client.xinfo_stream(keys.jobs)
    undelivered = stream["length"] > 0 and group["last-delivered-id"] != stream["last-generated-id"]
    return not (group["pending"] or client.zcard(keys.delayed) or undelivered)


def dead_by_job(client: redis.Redis, keys: Keys) -> dict[str, dict[str, str]]:
    return {
        f[b"job_id"].decode(): {k.decode(): v.decode() for k, v in f.items()} for _id, f in client.xrange(keys.dead)
    }


def assert_designed(client: redis.Redis, counter: redis.Redis, keys: Keys, kinds: dict[str, str], exact: bool) -> None:
    """Every job has its designed outcome; ``exact``: no handler ran more often than designed."""
    counted = runs(counter, keys.prefix)
    dead = dead_by_job(client, keys)
    for job_id, kind in kinds.items():
        designed = DESIGN[kind][1]
        ran = counted.get(job_id, 0)
        assert (ran == designed) if exact else (ran >= designed), (job_id, ran)
        if kind == "always_fail":
            assert dead[job_id]["reason"] == "exhausted", dead[job_id]
    assert set(dead) == {j for j, k in kinds.items() if k == "always_fail"}


def set_oom(client: redis.Redis) -> Callable[[], None]:
    """Make every write fail with OOM (maxmemory under what is used, noeviction); return the undo."""
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", max(1, used // 2))
    return lambda: client.config_set("maxmemory", 0)


def set_misconf(client: redis.Redis, tmp_path: Path) -> Callable[[], None]:
    """Make every write fail with MISCONF: a save point, stop-writes-on-bgsave-error, and a snapshot folder
    that is removed (so the snapshot cannot be written, even as root); return the undo (the folder back, a
    snapshot that succeeds; the episode ends when it has)."""
    folder = tmp_path / "snapshots"
    folder.mkdir()
    client.config_set("dir", str(folder))
    client.config_set("save", "3600 1")
    client.config_set("stop-writes-on-bgsave-error", "yes")
    shutil.rmtree(folder)
    client.bgsave()
    wait_for(lambda: client.info("persistence")["rdb_last_bgsave_status"] == "err", 10, "the snapshot to fail")

    def undo() -> None:
        folder.mkdir()
        client.config_set("dir", str(folder))  # the server's working folder was the removed one
        wait_for(lambda: not client.info("persistence")["rdb_bgsave_in_progress"], 10, "no snapshot running")
        client.bgsave()
        wait_for(lambda: client.info("persistence")["rdb_last_bgsave_status"] == "ok", 10, "a snapshot to succeed")

    return undo


def run_episode(
    tmp_path: Path,
    refusing: EmbeddedServer,
    counting: EmbeddedServer,
    prefix: str,
    refuse: Callable[[redis.Redis], Callable[[], None]],
) -> tuple[float, str]:
    """One worker, the 700 jobs, an episode of ``EPISODE_S`` after the first 100 runs; the recovery time (from
    the server accepting writes to every job's outcome recorded, the rest of the 700 included) and the worker's
    log."""
    client = redis.Redis.from_url(refusing.url)
    counter = redis.Redis.from_url(counting.url)
    keys = Keys(prefix)
    workers = Workers(refusing.url, prefix, tmp_path)
    env = {
        "COUNT_REDIS_URL": counting.url,
        "ARCHIVE_URL": "off",
        "SHUTDOWN_GRACE_S": str(GRACE_S),
        "WORKER_NAME": f"refusals-{os.getpid()}",
    }
    try:
        client.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
        kinds = enqueue_many_mixed(client, keys)
        proc = workers.start(KINDS, **env)
        wait_for(lambda: sum(runs(counter, prefix).values()) >= 100, 30, "the first 100 runs")
        undo = refuse(client)
        episode_ends = time.monotonic() + EPISODE_S
        wait_for(lambda: STARTED in workers.log(proc), 10, "the episode's warning")
        during = health(workers, env)
        time.sleep(max(0.0, episode_ends - time.monotonic()))  # the episode: how long the server refuses writes
        undo()
        back = time.monotonic()
        wait_for(lambda: ENDED in workers.log(proc), RECOVERY_S, "the episode's end line")
        landed_s = time.monotonic() - back
        wait_for(lambda: settled(client, keys), RECOVERY_S, "every job's outcome within 10 s")
        recovered_s = time.monotonic() - back
        assert_designed(client, counter, keys, kinds, exact=True)
        assert during.returncode == 0 and during.stdout.startswith("degraded: Redis refuses writes"), during
        # Healthy again with the worker's next heartbeat (every 5 s), the first written since the episode.
        wait_for(lambda: health(workers, env).stdout.startswith("healthy:"), 10, "health to say healthy")
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        log = workers.log(proc)
        waited = next(line for line in log.splitlines() if ENDED in line).split(": ", 1)[1]
        print(f"kept outcomes landed {landed_s:.1f} s after writes returned ({waited})")
        return recovered_s, log
    finally:
        workers.stop_all()


def health(workers: Workers, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m worker health`` for the test's worker."""
    return subprocess.run(
        [sys.executable, "-m", "worker", "health"],
        env=workers.env(KINDS, **env),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def assert_one_line_each(log: str) -> None:
    assert log.count(STARTED) == 1 and log.count(ENDED) == 1, log
    warnings = [line for line in log.splitlines() if "WARNING" in line and "failed on attempt" not in line]
    assert len(warnings) == 1, warnings
    for bad in ("Traceback", "never retrieved", "Could not record", "poison"):
        assert bad not in log, log


def test_a_full_redis_loses_no_outcome_and_runs_no_handler_again(
    tmp_path: Path, refusing: EmbeddedServer, counting: EmbeddedServer, prefix: str
) -> None:
    recovered_s, log = run_episode(tmp_path, refusing, counting, prefix, set_oom)
    assert_one_line_each(log)
    assert "OOM" in log
    print(f"maxmemory episode of {EPISODE_S:.0f} s: every outcome recorded {recovered_s:.1f} s after memory returned")


def test_a_failing_snapshot_loses_no_outcome_and_runs_no_handler_again(
    tmp_path: Path, refusing: EmbeddedServer, counting: EmbeddedServer, prefix: str
) -> None:
    recovered_s, log = run_episode(tmp_path, refusing, counting, prefix, lambda c: set_misconf(c, tmp_path))
    assert_one_line_each(log)
    assert "MISCONF" in log
    print(f"MISCONF episode of {EPISODE_S:.0f} s: every outcome recorded {recovered_s:.1f} s after writes returned")


def test_sigterm_during_an_episode_exits_within_the_grace_and_a_new_worker_finishes(
    tmp_path: Path, refusing: EmbeddedServer, counting: EmbeddedServer, prefix: str
) -> None:
    client = redis.Redis.from_url(refusing.url)
    counter = redis.Redis.from_url(counting.url)
    keys = Keys(prefix)
    workers = Workers(refusing.url, prefix, tmp_path)
    env = {
        "COUNT_REDIS_URL": counting.url,
        "ARCHIVE_URL": "off",
        "SHUTDOWN_GRACE_S": str(GRACE_S),
        "RECLAIM_IDLE_MS": "1000",
        "RECLAIM_INTERVAL_S": "0.2",
    }
    try:
        client.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
        kinds = enqueue_many_mixed(client, keys)
        proc = workers.start(KINDS, **env)
        wait_for(lambda: sum(runs(counter, prefix).values()) >= 100, 30, "the first 100 runs")
        undo = set_oom(client)
        wait_for(lambda: STARTED in workers.log(proc), 10, "the episode's warning")
        asked = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(GRACE_S + 5)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the worker did not exit within its grace period:\n{workers.log(proc)}")
        took_s = time.monotonic() - asked
        log = workers.log(proc)
        assert proc.returncode == 0, log
        assert took_s < GRACE_S + 3, took_s
        left = [line for line in log.splitlines() if "left pending" in line]
        assert len(left) == 1, log
        undo()
        workers.burst(KINDS, timeout_s=60, **env)
        assert settled(client, keys)
        assert_designed(client, counter, keys, kinds, exact=False)
        print(f"SIGTERM during an episode: exit {took_s:.1f} s after the signal; {left[0].split(': ', 1)[1]}")
    finally:
        workers.stop_all()


def test_enqueue_under_refusal_raises_one_clear_error_from_python_and_the_cli(
    tmp_path: Path, refusing: EmbeddedServer, prefix: str
) -> None:
    client = redis.Redis.from_url(refusing.url)
    undo = set_oom(client)
    with pytest.raises(QueueRefused, match=r"^Redis refuses writes \(OOM: out of memory.*the job was not enqueued"):
        worker.enqueue(client, "succeed", {"job_id": "j1"}, prefix=prefix)
    with pytest.raises(QueueRefused, match=r"\(OOM: .*some or all of the jobs were not enqueued"):
        worker.enqueue_many(client, [worker.NewJob("succeed"), worker.NewJob("succeed", delay_s=5)], prefix=prefix)
    env = Workers(refusing.url, prefix, tmp_path).env(KINDS)
    done = subprocess.run(
        [sys.executable, "-m", "worker", "enqueue", "succeed", "job_id=j2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 1 and done.stdout == "", done
    assert done.stderr.startswith("error: Redis refuses writes (OOM: out of memory") and done.stderr.count("\n") == 1
    undo()
    assert worker.enqueue(client, "succeed", {"job_id": "j3"}, prefix=prefix)
    assert client.xlen(Keys(prefix).jobs) == 1
