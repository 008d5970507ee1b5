"""SIGKILL one of two workers in the middle of 10,000 jobs: every job completes at
least once, none is lost, none is dead-lettered; the survivor reclaims the orphans."""

from __future__ import annotations

import signal
import time

import redis

from tests.faults.helpers import FAST_RECLAIM, KINDS, enqueue_many
from tests.faults.kinds_faults import runs_key
from tests.helpers import Workers, wait_for
from worker.store.heartbeats import live_workers
from worker.store.keys import GROUP, Keys

JOBS = 10_000


def test_sigkill_one_of_two_workers_mid_run_loses_nothing(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers
) -> None:
    victim = workers.start(KINDS, WORKER_NAME="fault-victim", **FAST_RECLAIM)
    survivor = workers.start(KINDS, WORKER_NAME="fault-survivor", **FAST_RECLAIM)
    wait_for(
        lambda: {"fault-victim", "fault-survivor"} <= live_workers(r, keys),
        timeout_s=60,
        what="both workers to start",
    )
    job_ids = enqueue_many(r, keys, "record", JOBS)
    runs = runs_key(prefix)

    wait_for(lambda: r.hlen(runs) >= JOBS // 5, timeout_s=60, what="a fifth of the jobs to complete")
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    killed_at = time.monotonic()
    done_at_kill = r.hlen(runs)
    owned = {c["name"].decode(): c["pending"] for c in r.xpending(keys.jobs, GROUP)["consumers"]}
    orphans = owned.get("fault-victim", 0)

    def all_done() -> bool:
        return r.hlen(runs) == JOBS and r.xpending(keys.jobs, GROUP)["pending"] == 0

    wait_for(all_done, timeout_s=90, what="every job to complete and nothing to stay pending")
    recovered_s = time.monotonic() - killed_at

    counts = {k.decode(): int(v) for k, v in r.hgetall(runs).items()}
    assert set(counts) == set(job_ids), "a job was lost"
    assert min(counts.values()) >= 1
    assert r.xlen(keys.dead) == 0, "a job was dead-lettered"
    assert r.zcard(keys.delayed) == 0
    assert orphans >= 1, "the victim owned no pending entry when killed: the test did not test reclaim"
    reruns = sum(counts.values()) - JOBS
    assert reruns <= orphans, "more jobs ran twice than the victim had pending"
    survivor_log = workers.log(survivor)
    assert "Reclaimed entry" in survivor_log
    survivor.send_signal(signal.SIGTERM)
    assert survivor.wait(30) == 0
    print(
        f"\nkill figures: killed after {done_at_kill} of {JOBS} jobs; victim had {orphans} pending; "
        f"{reruns} jobs ran twice; all {JOBS} complete {recovered_s:.1f} s after the kill; 0 dead"
    )
