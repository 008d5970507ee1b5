"""Unique keys under real concurrency: producer processes enqueuing one key at once while two workers run
the jobs (one execution per holding period, never two at once), and a worker SIGKILLed mid-job (its key
held until the reclaimed run settles: the at-least-once re-run, counted)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
import redis

from tests.helpers import ROOT, Workers, wait_for
from tests.queue.test_unique import KINDS, double_writes, runs
from worker.store.enqueue import enqueue
from worker.store.keys import GROUP, Keys

PRODUCERS, ENQUEUES, SECONDS = 4, 5000, 3
FAST_RECLAIM = {"RECLAIM_IDLE_MS": "1000", "RECLAIM_INTERVAL_S": "0.2"}

PRODUCER = """
import sys, time, redis
from worker.store.enqueue import enqueue
r = redis.Redis.from_url(sys.argv[1])
deadline = time.monotonic() + float(sys.argv[4])
refs = set()
for i in range(int(sys.argv[3])):
    if time.monotonic() > deadline:
        break
    refs.add(enqueue(r, "unique_once", {"n": i}, unique_key="hot", prefix=sys.argv[2]))
print(len(refs))
"""


TAKING_TURNS = """
import sys, time, redis
from worker.store.enqueue import enqueue
r = redis.Redis.from_url(sys.argv[1])
turn, due = sys.argv[2] + "test:turn", float(sys.argv[5])
for n in range(int(sys.argv[3]), 20, 2):
    deadline = time.monotonic() + 30
    while int(r.get(turn) or 0) != n and time.monotonic() < deadline:
        time.sleep(0.001)  # the other producer's turn: it enqueues n - 1 first
    guard = {"unique_key": f"k{n}"} if sys.argv[4] == "unique" else {}
    enqueue(r, "unique_ok", {"n": n}, run_at=due, prefix=sys.argv[2], **guard)
    r.incr(turn)
"""


@pytest.mark.parametrize("mode", ["plain", "unique"])
def test_jobs_of_two_producers_due_at_one_moment_are_promoted_in_enqueue_order(
    r: redis.Redis, keys: Keys, workers: Workers, redis_url: str, mode: str
) -> None:
    """Two processes take turns enqueuing 20 jobs due at one moment (each waits for the other's last one),
    without a key (``enqueue_later``) and with one each (``enqueue_once``)."""
    due = r.time()[0] - 1.0 + 0.123456  # due at once: promoted in one batch, by score
    argv = [redis_url, keys.prefix]
    producers = [
        subprocess.Popen([sys.executable, "-c", TAKING_TURNS, *argv, str(first), mode, repr(due)], cwd=ROOT)
        for first in (0, 1)
    ]
    assert [proc.wait(60) for proc in producers] == [0, 0]
    scores = [score for _, score in r.zrange(keys.delayed, 0, -1, withscores=True)]
    assert len(set(scores)) == 20 and 0 <= max(scores) - due < 1e-5, "each its own score, at the run time"
    workers.burst(KINDS, WORKER_CONCURRENCY="1")
    promoted = [int(fields[b"n"]) for _, fields in r.xrange(keys.jobs)]
    assert promoted == list(range(20)), "promoted in enqueue order, across the two processes"


def test_concurrent_producers_never_get_two_jobs_of_one_key(
    r: redis.Redis, keys: Keys, workers: Workers, redis_url: str
) -> None:
    for _ in range(2):
        workers.start(KINDS)
    wait_for(lambda: r.zcard(keys.workers) == 2, what="both workers to start")
    producers = [
        subprocess.Popen(
            [sys.executable, "-c", PRODUCER, redis_url, keys.prefix, str(ENQUEUES), str(SECONDS)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(PRODUCERS)
    ]
    try:
        outs = [proc.communicate(timeout=60)[0] for proc in producers]
    finally:
        for proc in producers:
            proc.kill()
    assert all(proc.returncode == 0 for proc in producers)
    wait_for(lambda: not r.exists(keys.unique("unique_once", "hot")), what="the last job to settle")
    done = runs(r, keys)
    job_ids = [run.split(":", 1)[1] for run in done]
    assert len(done) >= 2, f"only {len(done)} holding periods: the producers should outlast a job"
    assert len(set(job_ids)) == len(job_ids), "a job ran twice (two tokens of one job id)"
    print(f"executions by token: {len(done)}; records written twice (one run each): {double_writes(r, keys)}")
    assert r.get(f"{keys.prefix}test:overlaps") is None, "two jobs of one key ran at once"
    assert sum(int(out) for out in outs) >= len(done)


def test_a_sigkilled_workers_job_keeps_its_key_until_the_reclaimed_run_settles(
    r: redis.Redis, keys: Keys, workers: Workers
) -> None:
    lock = keys.unique("unique_slow", "long")
    first = enqueue(r, "unique_slow", {}, unique_key="long", prefix=keys.prefix)
    victim = workers.start(KINDS, WORKER_NAME="victim", **FAST_RECLAIM)
    wait_for(lambda: runs(r, keys), what="the job to start")
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    assert enqueue(r, "unique_slow", {}, unique_key="long", prefix=keys.prefix) == first  # still held
    r.set(f"{keys.prefix}test:gate", 1)  # the next run ends at once
    survivor = workers.start(KINDS, WORKER_NAME="survivor", **FAST_RECLAIM)
    wait_for(lambda: not r.exists(lock), what="the reclaimed run to settle and release the key")
    assert len(runs(r, keys)) == 2, "one re-run after the kill (at least once), counted"
    assert enqueue(r, "unique_slow", {}, unique_key="long", prefix=keys.prefix) != first
    survivor.terminate()
    survivor.wait(30)


def test_a_poison_entry_releases_its_key_when_buried(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    lock = keys.unique("unique_ok", "poison")
    enqueue(r, "unique_ok", {}, unique_key="poison", prefix=keys.prefix)
    r.xgroup_create(keys.jobs, GROUP, id="0")
    r.xreadgroup(GROUP, "ghost", {keys.jobs: ">"}, count=1)  # delivered to a worker that died at once
    proc = workers.start(KINDS, MAX_DELIVERIES="1", **FAST_RECLAIM)
    wait_for(lambda: r.xlen(keys.dead), what="the poison check to bury the entry")
    [(_, dead)] = r.xrange(keys.dead)
    assert dead[b"reason"] == b"poison" and not r.exists(lock) and not runs(r, keys)
    proc.terminate()
    proc.wait(30)
