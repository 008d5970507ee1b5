"""Reclaim at the speed of the jobs: 400 entries a dead process left pending (10 ms jobs) are claimed and run
alone, back to back, in seconds, not one per block time or per RECLAIM_INTERVAL_S; each runs once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.faults.kinds_refusals import runs_key
from tests.helpers import Workers, wait_for
from worker.embedded.servers import EmbeddedServer, start_redis
from worker.store.keys import GROUP, Keys

KINDS = "tests.faults.kinds_refusals"
ENTRIES = 400


@pytest.fixture
def counting(tmp_path: Path) -> Iterator[EmbeddedServer]:
    server = start_redis(tmp_path / "counting")
    yield server
    server.stop()


def test_a_dead_process_s_400_entries_are_reclaimed_back_to_back(
    tmp_path: Path, redis_url: str, prefix: str, counting: EmbeddedServer
) -> None:
    client = redis.Redis.from_url(redis_url)
    counter = redis.Redis.from_url(counting.url)
    keys = Keys(prefix)
    client.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
    pipe = client.pipeline(transaction=False)
    for n in range(ENTRIES):
        pipe.xadd(keys.jobs, {"kind": "succeed", "job_id": f"j{n}", "attempts": "0"})
    pipe.execute()
    # A process that read them all and died: each entry pending, delivered once, in its name.
    assert len(client.xreadgroup(GROUP, "gone-1", {keys.jobs: ">"}, count=ENTRIES)[0][1]) == ENTRIES
    workers = Workers(redis_url, prefix, tmp_path)
    env = {"COUNT_REDIS_URL": counting.url, "JOB_MS": "10", "RECLAIM_IDLE_MS": "500", "RECLAIM_INTERVAL_S": "5"}
    try:
        started = time.monotonic()
        proc = workers.start(KINDS, **env)
        wait_for(lambda: counter.hlen(runs_key(prefix)) == ENTRIES, 60, "every entry to run")
        took_s = time.monotonic() - started
        counts = {int(v) for v in counter.hvals(runs_key(prefix))}
        wait_for(lambda: not client.xpending(keys.jobs, GROUP)["pending"], 10, "every entry acknowledged")
        log = workers.log(proc)
    finally:
        workers.stop_all()
    assert counts == {1}
    assert log.count("running it alone") == ENTRIES
    # Two pages of 100 a second would be 2 s; one per RECLAIM_INTERVAL_S (5 s) would be over half an hour.
    assert took_s < 40, took_s
    print(f"{ENTRIES} reclaimed entries of 10 ms jobs ran alone in {took_s:.1f} s (worker start included)")
