"""Redis restarted in the middle of 10,000 jobs (an embedded server with appendonly
and appendfsync always, stopped and started again on the same port): the workers
reconnect with backoff and finish; jobs acknowledged before the restart are not run
again; none is lost, none is dead-lettered.

What was acknowledged at the restart is read from a copy of the stopped server's
files, served by a scratch server on another port, so the check does not race
the workers that reconnect to the restarted one.
"""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path

import redis

from tests.faults.helpers import KINDS, enqueue_many
from tests.faults.kinds_faults import runs_key
from tests.helpers import Workers, wait_for
from worker.embedded.servers import free_port, start_redis
from worker.store.keys import GROUP, Keys

JOBS = 10_000
OUTAGE_S = 2.0
"""How long Redis stays away: long enough that the workers' reconnect backoff grows."""
DURABLE = ("--appendonly", "yes", "--appendfsync", "always")
#: What a worker says when it notices Redis is gone, and what it says once it is back: its read loop, or,
#: when every slot was keeping a decided outcome (so no read ran while Redis was away), its episode.
RECOVERY = {
    "Lost the connection to Redis": "Reconnected to Redis",
    "Redis refuses writes": "Redis accepts writes again",
}


def noticed(log: str) -> list[str]:
    """The recovery lines a worker's ``log`` owes: one for each way it noticed that Redis was gone."""
    return [back for lost, back in RECOVERY.items() if lost in log]


def acknowledged(client: redis.Redis, keys: Keys, job_ids: list[str]) -> set[str]:
    """Job ids whose entries were delivered and acknowledged: neither undelivered nor pending."""
    group = next(g for g in client.xinfo_groups(keys.jobs) if g["name"] in (GROUP, GROUP.encode()))
    last = group["last-delivered-id"]
    pending = {p["message_id"] for p in client.xpending_range(keys.jobs, GROUP, "-", "+", JOBS)}
    open_ids = {
        fields[b"job_id"].decode()
        for entry_id, fields in client.xrange(keys.jobs)
        if entry_id in pending or _after(entry_id, last)
    }
    return set(job_ids) - open_ids


def _after(entry_id: bytes, last: bytes) -> bool:
    ms, seq = map(int, entry_id.split(b"-"))
    last_ms, last_seq = map(int, last.split(b"-"))
    return (ms, seq) > (last_ms, last_seq)


def test_redis_restart_mid_run(tmp_path: Path, prefix: str, workers: Workers) -> None:
    keys = Keys(prefix)
    data, copy = tmp_path / "valkey", tmp_path / "valkey-copy"
    port = free_port()
    server = start_redis(data, port=port, extra_args=DURABLE)
    client = redis.Redis.from_url(server.url)
    scratch = None
    try:
        job_ids = enqueue_many(client, keys, "record", JOBS)
        env = {"REDIS_URL": server.url, "RECLAIM_IDLE_MS": "2000", "RECLAIM_INTERVAL_S": "0.5"}
        procs = [workers.start(KINDS, **env) for _ in range(2)]
        runs = runs_key(prefix)
        wait_for(lambda: client.hlen(runs) >= JOBS // 4, timeout_s=60, what="a quarter of the jobs to complete")

        server.stop()
        stopped = time.monotonic()
        client.close()
        shutil.copytree(data, copy)
        # A worker whose slots all keep a decided outcome says so by its episode, not by a read; one worker
        # noticing is enough to go on.
        wait_for(
            lambda: any(noticed(workers.log(p)) for p in procs),
            timeout_s=30,
            what="a worker to notice that Redis is gone",
        )
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - stopped)))  # the fault itself: Redis stays away
        down_s = time.monotonic() - stopped
        server = start_redis(data, port=port, extra_args=DURABLE)
        client = redis.Redis.from_url(server.url)

        scratch = start_redis(copy, extra_args=DURABLE)
        with redis.Redis.from_url(scratch.url) as before:
            acked = acknowledged(before, keys, job_ids)
            runs_before = {k.decode(): int(v) for k, v in before.hgetall(runs).items()}
        scratch.stop()
        scratch = None

        def all_done() -> bool:
            return client.hlen(runs) == JOBS and client.xpending(keys.jobs, GROUP)["pending"] == 0

        wait_for(all_done, timeout_s=90, what="every job to complete after the restart")
        finished_s = time.monotonic() - stopped

        runs_after = {k.decode(): int(v) for k, v in client.hgetall(runs).items()}
        assert set(runs_after) == set(job_ids), "a job was lost"
        assert client.xlen(keys.dead) == 0, "a job was dead-lettered"
        assert acked, "nothing was acknowledged before the restart: the test restarted too early"
        rerun = sorted(j for j in acked if runs_after[j] != runs_before.get(j))
        assert not rerun, f"{len(rerun)} jobs acknowledged before the restart ran again, e.g. {rerun[:5]}"
        owed = {p: noticed(workers.log(p)) for p in procs}
        assert any(owed.values())
        # A worker whose peer ran the rest may still be in its reconnect backoff (up to 5 s): wait for its lines.
        wait_for(
            lambda: all(back in workers.log(p) for p, lines in owed.items() for back in lines),
            timeout_s=30,
            what="every worker that lost Redis to reconnect",
        )
        for proc in procs:
            assert proc.poll() is None, "a worker died"
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
        twice = sum(runs_after.values()) - JOBS
        print(
            f"\nrestart figures: {len(acked)} jobs acknowledged before the restart, none re-run; "
            f"Redis down {down_s:.1f} s; all {JOBS} complete {finished_s:.1f} s after the stop; "
            f"{twice} unacknowledged jobs ran twice; 0 dead"
        )
    finally:
        client.close()
        if scratch is not None:
            scratch.stop()
        server.stop()
