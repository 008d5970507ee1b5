"""Scaling down loses nothing: replicas started and stopped (SIGTERM) the way an autoscaler does, while
jobs run. Each stopped worker lets its jobs finish within SHUTDOWN_GRACE_S and gives back those that do
not (and what it read ahead) for the next reclaim: every job finishes exactly once, and long before
RECLAIM_IDLE_MS (a minute here) would have let an abandoned entry be reclaimed."""

from __future__ import annotations

import signal
import subprocess
import time

import redis

from tests.helpers import Workers, wait_for
from worker.store.enqueue import NewJob, enqueue_many
from worker.store.heartbeats import live_workers
from worker.store.keys import GROUP, Keys

KINDS = "tests.queue.kinds_scaling"
RECLAIM_IDLE_MS = 60_000
ENV = {
    "RECLAIM_IDLE_MS": str(RECLAIM_IDLE_MS),
    "RECLAIM_INTERVAL_S": "0.2",
    "SHUTDOWN_GRACE_S": "1",
    "WORKER_CONCURRENCY": "4",
    "MAX_DELIVERIES": "5",
    "ARCHIVE_URL": "off",
}
LONG = [f"long-{n}" for n in range(3)]  # held until the test releases them: cancelled at each stop, given back
SHORT = [f"short-{n}" for n in range(120)]


def counts(r: redis.Redis, keys: Keys, name: str) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in r.hgetall(f"{keys.prefix}test:{name}").items()}


def stop(proc: subprocess.Popen[str], workers: Workers) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0, workers.log(proc)


def test_a_scale_down_reruns_nothing_that_finished_and_leaves_nothing_waiting(
    r: redis.Redis, keys: Keys, workers: Workers
) -> None:
    jobs = [NewJob("counted", {"job_id": j, "s": "0", "hold": "yes"}) for j in LONG]
    jobs += [NewJob("counted", {"job_id": j, "s": "0.05"}) for j in SHORT]
    enqueue_many(r, jobs, prefix=keys.prefix)
    first = workers.start(KINDS, WORKER_NAME="replica-a", **ENV)  # one replica: the scaler activated
    wait_for(lambda: set(LONG) <= set(counts(r, keys, "started")), what="the long jobs to start on replica-a")
    more = [workers.start(KINDS, WORKER_NAME=f"replica-{n}", **ENV) for n in "bc"]  # scaled up to three
    wait_for(lambda: {"replica-b", "replica-c"} <= live_workers(r, keys), what="the new replicas' heartbeats")
    stop(first, workers)  # scaled down to two: its long jobs are cancelled at the grace's end
    assert "Gave back 3 jobs told to stop" in workers.log(first)
    wait_for(lambda: max(counts(r, keys, "started").values()) >= 2, what="a long job to be reclaimed")
    stop(more[0], workers)  # and to one, whatever it was running
    stopped_at = time.monotonic()
    r.set(f"{keys.prefix}test:release", 1)
    wait_for(
        lambda: len(counts(r, keys, "finished")) == len(LONG) + len(SHORT),
        timeout_s=30,
        what="every job to finish on the last replica",
    )
    assert time.monotonic() - stopped_at < RECLAIM_IDLE_MS / 1000 / 2, "nothing waited for RECLAIM_IDLE_MS"
    finished = counts(r, keys, "finished")
    assert set(finished.values()) == {1}, {j: n for j, n in finished.items() if n != 1}
    started = counts(r, keys, "started")
    assert all(started[j] == 1 for j in SHORT), {j: started[j] for j in SHORT if started[j] != 1}
    assert all(started[j] >= 2 for j in LONG)  # cancelled on replica-a, run again to the end elsewhere
    wait_for(lambda: r.xpending(keys.jobs, GROUP)["pending"] == 0, timeout_s=10, what="nothing pending")
    stop(more[1], workers)


def test_a_job_still_running_in_a_thread_is_not_given_back(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    """A thread that ignores job.stopping is not stopped: its entry is given back only to be reclaimed once
    the process is gone (no second attempt beside the first)."""
    r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
    enqueue_many(r, [NewJob("counted_in_thread", {"job_id": "t1", "s": "8"})], prefix=keys.prefix)
    proc = workers.start(KINDS, **{**ENV, "RECLAIM_IDLE_MS": "600000", "STOP_GRACE_S": "0.5"})
    wait_for(lambda: r.xpending(keys.jobs, GROUP)["pending"] == 1, what="the thread's job to start")
    stop(proc, workers)
    (pending,) = r.xpending_range(keys.jobs, GROUP, min="-", max="+", count=10)
    assert 600_000 - 3_000 <= pending["time_since_delivered"] < 600_000  # reclaimable 3 s after the exit
    assert "1 jobs still ran after they were told to stop (their handler ignores job.stopping)" in workers.log(proc)
