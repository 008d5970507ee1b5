"""Producers retrying after replies lost on the way back (a TCP proxy of the tests' own delays them past
the client's socket timeout): with the producer's job id, each retry adds nothing and returns the first
entry id, so every job runs once; with a unique key alike."""

from __future__ import annotations

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.faults.helpers_proxy import Proxy
from tests.helpers import Workers, wait_for
from tests.queue.test_unique import KINDS, double_writes, runs
from worker.store.enqueue import enqueue
from worker.store.keys import Keys
from worker.store.unique import script_source

JOBS = 4


def lost_then_retried(
    client: redis.Redis, r: redis.Redis, redis_proxy: Proxy, keys: Keys, guard: dict[str, str]
) -> str:
    """One enqueue whose reply is lost (delayed past the timeout), then retried once the write is in."""
    client.ping()  # a connection made (its handshake passes) and the script loaded: only the write is delayed
    client.script_load(script_source())
    redis_proxy.delay_s = 0.6
    with pytest.raises(redis.exceptions.TimeoutError):
        enqueue(client, "unique_ok", {}, prefix=keys.prefix, **guard)  # type: ignore[arg-type]
    redis_proxy.delay_s = 0.0
    mark = keys.enqueued(guard["job_id"]) if "job_id" in guard else keys.unique("unique_ok", guard["unique_key"])
    wait_for(lambda: r.exists(mark), timeout_s=10, what="the first write to reach Redis")
    return enqueue(client, "unique_ok", {}, prefix=keys.prefix, **guard)  # type: ignore[arg-type]


def test_retries_after_lost_replies_add_each_job_once(
    r: redis.Redis, keys: Keys, redis_proxy: Proxy, workers: Workers
) -> None:
    client = redis.Redis.from_url(redis_proxy.url, socket_timeout=0.3, retry=Retry(NoBackoff(), 0))
    try:
        refs = [lost_then_retried(client, r, redis_proxy, keys, {"job_id": f"order-{i}"}) for i in range(JOBS)]
        refs.append(lost_then_retried(client, r, redis_proxy, keys, {"unique_key": "k"}))
    finally:
        client.close()
    entries = [entry_id.decode() for entry_id, _ in r.xrange(keys.jobs)]
    assert entries == refs, "each retry returned the first entry id, and nothing else was added"
    workers.burst(KINDS)
    done = runs(r, keys)  # one per token: a record the worker's client sent twice counts once
    print(f"executions by token: {len(done)}; records written twice (one run each): {double_writes(r, keys)}")
    assert len(done) == JOBS + 1, "zero duplicate executions"
    assert len({run.split(":", 1)[1] for run in done}) == JOBS + 1, "each job id ran once"
