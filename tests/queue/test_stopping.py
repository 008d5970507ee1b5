"""Stopping a job against a real server: a timeout stops the attempt at its handler's start + timeout_s, no
two attempts of one job ever overlap, a hung thread keeps its slot and nothing else, and a shutdown keeps
SHUTDOWN_GRACE_S whatever the handlers do (docs/worker.md, "Stopping a job")."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from typing import Any

import pytest
import redis

from tests.helpers import Workers, exits_within_grace, registry_of, wait_for
from worker.cli.assembly import assembled
from worker.settings import Settings
from worker.store.enqueue import enqueue
from worker.store.keys import GROUP, Keys

KINDS = "tests.queue.kinds_stopping"
FAST_RECLAIM = {"RECLAIM_IDLE_MS": "600", "RECLAIM_INTERVAL_S": "0.2"}


def tkey(keys: Keys, name: str) -> str:
    return f"{keys.prefix}test:{name}"


def spans(r: redis.Redis, keys: Keys, job_id: str) -> list[tuple[float, float]]:
    """The (start, end) of each attempt of ``job_id``, in the order they ended."""
    return [tuple(map(float, s.split())) for s in r.lrange(tkey(keys, f"spans:{job_id}"), 0, -1)]  # type: ignore[misc]


def job_id_of(r: redis.Redis, keys: Keys, entry_id: str) -> str:
    return r.xrange(keys.jobs, entry_id, entry_id)[0][1][b"job_id"].decode()


def dead_by_job(r: redis.Redis, keys: Keys) -> dict[str, dict[str, str]]:
    dead = ({k.decode(): v.decode() for k, v in f.items()} for _, f in r.xrange(keys.dead))
    return {d["job_id"]: d for d in dead}


def test_attempts_of_a_handler_that_ignores_its_timeout_never_overlap(
    r: redis.Redis, keys: Keys, workers: Workers
) -> None:
    """Six 0.8 s plain jobs, timeout_s=0.3, 2 retries, 4 slots: each attempt ends when its handler returns,
    so the three attempts of each job run one after the other, and each is a JobTimeout."""
    ids = [job_id_of(r, keys, enqueue(r, "stubborn", {"n": i}, prefix=keys.prefix)) for i in range(6)]
    out = workers.here(KINDS, WORKER_CONCURRENCY="4").stdout
    dead = dead_by_job(r, keys)
    for job_id in ids:
        attempts = sorted(spans(r, keys, job_id))
        assert len(attempts) == 3, attempts
        for (_, end), (start, _) in itertools.pairwise(attempts):
            assert start >= end, f"job {job_id}: an attempt started at {start} before the previous ended at {end}"
        assert dead[job_id]["error"] == "JobTimeout: stubborn ran longer than its timeout of 0.3 s"
        assert dead[job_id]["attempts"] == "3"
    assert out.count("ran over its timeout of 0.3 s") == 18  # once an attempt


def test_a_plain_handler_that_heeds_job_stopping_stops_at_its_timeout(
    r: redis.Redis, keys: Keys, workers: Workers
) -> None:
    job_id = job_id_of(r, keys, enqueue(r, "polite", {"sleep_s": "20"}, prefix=keys.prefix))
    workers.here(KINDS)
    [(start, end)] = spans(r, keys, job_id)
    assert 0.3 <= end - start < 1.3  # its timeout, not its 20 s
    assert r.get(tkey(keys, f"stopped:{job_id}")) == b"yes"
    assert dead_by_job(r, keys)[job_id]["error"].startswith("JobTimeout")


def test_a_quick_job_after_a_hung_one_runs_and_is_not_charged_its_time(
    r: redis.Redis, keys: Keys, workers: Workers
) -> None:
    """One slot: the quick job (timeout_s=1) starts after the hung handler returned (1.2 s), and its own time
    starts then: it succeeds, though it waited longer than its timeout."""
    hung = job_id_of(r, keys, enqueue(r, "stubborn", {"sleep_s": "1.2"}, prefix=keys.prefix))
    quick = job_id_of(r, keys, enqueue(r, "quick_timed", {}, prefix=keys.prefix))
    workers.here(KINDS, WORKER_CONCURRENCY="1")
    assert r.smembers(tkey(keys, "done")) == {quick.encode()}
    assert list(dead_by_job(r, keys)) == [hung]
    [(quick_start, _)] = spans(r, keys, quick)
    first_end = min(end for _, end in spans(r, keys, hung))
    assert quick_start >= first_end  # never beside the hung handler: one slot is one handler
    assert r.xpending(keys.jobs, GROUP)["pending"] == 0


def test_entries_read_ahead_are_given_back_while_every_slot_holds_a_hung_handler(
    r: redis.Redis, keys: Keys, workers: Workers, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="worker"):
        read_ahead_given_back(r, keys.prefix, workers)
    assert "3 entries read ahead cannot start: every slot is held by a handler" in caplog.text


def read_ahead_given_back(client: Any, prefix: str, workers: Workers, partitions: int = 1) -> None:
    """Two slots held by handlers past their timeout (15 s, ignoring job.stopping) and three entries read
    ahead: the claim refresher gives those back, and another worker runs them while the hung ones run on
    (also on a cluster's partitions: tests/cluster/test_stopping_cluster.py)."""
    at: dict[str, Any] = {"prefix": prefix, "partitions": partitions}
    hung = [enqueue(client, "stubborn", {"sleep_s": "15", "n": i}, **at) for i in range(2)]
    env = {"QUEUE_PARTITIONS": str(partitions), **FAST_RECLAIM}
    grace = {"SHUTDOWN_GRACE_S": "0.5", "STOP_GRACE_S": "0.5"}
    settings = Settings.from_env(workers.env(KINDS, WORKER_CONCURRENCY="2", **grace, **env))
    done = f"{prefix}test:done"

    async def main() -> None:
        async with assembled(settings, settings.redis_url, settings.database_url, registry=registry_of(KINDS)) as w:
            run = asyncio.create_task(w.run())
            deadline = time.monotonic() + 10
            while w.executor.overdue() < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert w.executor.overdue() == 2
            for i in range(3):
                enqueue(client, "quick", {"n": i}, **at)
            for part in w.parts:
                now = time.monotonic()
                w.slots.ahead.extend((part, entry_id, raw, now) for entry_id, raw in await part.read(3, block=False))
            assert len(w.slots.ahead) == 3
            other = workers.start(KINDS, **env)
            while client.scard(done) < 3 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert client.scard(done) == 3
            assert not w.slots.ahead
            assert sorted(entry for _part, entry in w.executor.running) == sorted(hung)  # still running here
            other.terminate()
            w.stop()
            await run

    asyncio.run(main())


def test_sigterm_keeps_the_grace_whatever_the_handlers_do(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    """Four jobs mid-run at SIGTERM: one finishes within SHUTDOWN_GRACE_S (acknowledged), a plain one and
    an async one stop when told (given back at once), a plain one ignores job.stopping (given back for a
    reclaim after this process is gone). The worker exits 0 within the grace, STOP_GRACE_S and a second."""
    idle_ms = 600_000
    entries = {
        "finishes": enqueue(r, "sync_long", {"sleep_s": "0.5"}, prefix=keys.prefix),
        "heeds": enqueue(r, "sync_long", {"sleep_s": "30"}, prefix=keys.prefix),
        "ignores": enqueue(r, "sync_long", {"sleep_s": "30", "ignore": "yes"}, prefix=keys.prefix),
        "async": enqueue(r, "async_long", {"sleep_s": "30"}, prefix=keys.prefix),
    }
    ids = {name: job_id_of(r, keys, entry) for name, entry in entries.items()}
    env = {"WORKER_CONCURRENCY": "4", "SHUTDOWN_GRACE_S": "1", "STOP_GRACE_S": "1", "RECLAIM_IDLE_MS": str(idle_ms)}
    proc = workers.start(KINDS, **env)
    wait_for(lambda: r.scard(tkey(keys, "started")) == 4, what="the four jobs to start")
    exits_within_grace(proc)
    assert r.smembers(tkey(keys, "done")) == {ids["finishes"].encode()}
    assert r.smembers(tkey(keys, "stopped")) == {ids["heeds"].encode(), ids["async"].encode()}
    pending = {p["message_id"].decode(): p for p in r.xpending_range(keys.jobs, GROUP, "-", "+", 10)}
    assert set(pending) == {entries["heeds"], entries["ignores"], entries["async"]}  # the finished one was acked
    for name in ("heeds", "async"):
        assert pending[entries[name]]["time_since_delivered"] >= idle_ms  # reclaimable at once
    assert idle_ms - 3000 <= pending[entries["ignores"]]["time_since_delivered"] < idle_ms  # a little later
    assert all(p["times_delivered"] == 1 for p in pending.values())
    log = workers.log(proc)
    assert "Gave back 2 jobs told to stop at the end of SHUTDOWN_GRACE_S=1 s" in log
    assert f"sync_long {ids['heeds']} ({entries['heeds']})" in log
    assert f"async_long {ids['async']} ({entries['async']})" in log
    assert "1 jobs still ran after they were told to stop (their handler ignores job.stopping)" in log
    assert f"sync_long {ids['ignores']} ({entries['ignores']})" in log


def test_process_isolation_kills_a_handler_that_will_not_stop(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    """time.sleep(60) in a child, timeout_s=0.3, STOP_GRACE_S=0.5: the child is killed and the attempt is a
    JobTimeout, within a second or so of its start."""
    job_id = job_id_of(r, keys, enqueue(r, "isolated_sleep", {}, prefix=keys.prefix))
    started = time.monotonic()
    workers.here(KINDS, STOP_GRACE_S="0.5")
    assert time.monotonic() - started < 10
    pid = int(r.get(tkey(keys, f"pid:{job_id}")))
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the child is gone
    dead = dead_by_job(r, keys)[job_id]
    assert dead["error"] == "JobTimeout: isolated_sleep ran longer than its timeout of 0.3 s"
    assert "JobKilled: isolated_sleep's process was killed after STOP_GRACE_S=0.5 s" in dead["traceback"]


def test_process_isolation_brings_back_results_errors_and_deaths(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    ok = job_id_of(r, keys, enqueue(r, "isolated", {}, prefix=keys.prefix))
    fails = job_id_of(r, keys, enqueue(r, "isolated", {"fail": "yes", "order_id": "4471"}, prefix=keys.prefix))
    dies = job_id_of(r, keys, enqueue(r, "isolated", {"die": "SIGKILL"}, prefix=keys.prefix))
    segv = job_id_of(r, keys, enqueue(r, "isolated", {"die": "SIGSEGV"}, prefix=keys.prefix))
    workers.here(KINDS)
    assert r.smembers(tkey(keys, "done")) == {ok.encode()}
    dead = dead_by_job(r, keys)
    assert dead[fails]["error"] == "ValueError: order 4471 failed in its child"
    assert 'raise ValueError(f"order' in dead[fails]["traceback"]  # the child's own traceback
    assert dead[dies]["error"] == "JobKilled: isolated's process was killed by SIGKILL before it finished"
    assert dead[segv]["error"] == "JobKilled: isolated's process was killed by SIGSEGV before it finished"
    assert all(dead[j]["attempts"] == "2" for j in (fails, dies, segv))  # failed attempts, retried as declared
    pids = {int(p) for j in (ok, fails, dies, segv) for p in r.lrange(tkey(keys, f"pids:{j}"), 0, -1)}
    assert len(pids) == 7 and os.getpid() not in pids  # one child per attempt
