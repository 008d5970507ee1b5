"""``run_worker``: one worker in the test's own process, on the real server, until its stop event or a drain."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from tests.helpers import wait_for
from worker import Job, enqueue, job_kind, run_worker
from worker.errors import SettingsError
from worker.kinds import Registry
from worker.settings import Settings
from worker.store.keys import GROUP, Keys

STOP_WITHIN_S = 5.0


def settings_for(redis_url: str, keys: Keys) -> Settings:
    return Settings.from_env({"REDIS_URL": redis_url, "QUEUE_PREFIX": keys.prefix, "ARCHIVE_URL": "off"})


def test_a_worker_in_a_thread_runs_what_is_enqueued_while_it_serves_and_stops_when_told(
    r: redis.Redis, keys: Keys, redis_url: str
) -> None:
    registry, ran = Registry(), []

    @job_kind("remember", registry=registry)
    def remember(job: Job) -> None:  # a synchronous handler: it runs in the worker's threads
        ran.append(job.fields["n"])

    stop, codes = threading.Event(), []
    thread = threading.Thread(
        target=lambda: codes.append(run_worker(settings_for(redis_url, keys), registry=registry, stop=stop))
    )
    thread.start()
    try:
        wait_for(lambda: r.zcard(keys.workers), what="the worker's first heartbeat")
        for n in range(5):  # enqueued while it serves: no burst, it waits for them
            enqueue(r, "remember", {"n": n}, prefix=keys.prefix)
        wait_for(lambda: len(ran) == 5, what="the five jobs to run")
    finally:
        stop.set()
        asked = time.monotonic()
        thread.join(STOP_WITHIN_S)
    assert not thread.is_alive(), f"run_worker did not return within {STOP_WITHIN_S} s of its stop event"
    assert time.monotonic() - asked < STOP_WITHIN_S
    assert codes == [0]
    assert sorted(ran) == ["0", "1", "2", "3", "4"]
    assert r.xpending(keys.jobs, GROUP)["pending"] == 0  # acknowledged before it returned


def test_burst_returns_once_the_queue_is_drained_with_the_outcomes_recorded(
    r: redis.Redis, keys: Keys, redis_url: str
) -> None:
    registry = Registry()

    @job_kind("refuse", registry=registry)
    async def refuse(job: Job) -> None:
        raise ValueError(f"order {job.fields['order']} refused")

    enqueue(r, "refuse", {"order": "4471"}, prefix=keys.prefix)
    assert run_worker(settings_for(redis_url, keys), registry=registry, burst=True) == 0
    [(_id, dead)] = r.xrange(keys.dead)
    assert dead[b"error"] == b"ValueError: order 4471 refused"
    assert dead[b"reason"] == b"exhausted"


def test_no_kinds_at_all_is_refused_in_one_line(redis_url: str, keys: Keys) -> None:
    with pytest.raises(SettingsError, match="no job kinds: set WORKER_KINDS"):
        run_worker(settings_for(redis_url, keys), registry=Registry())
