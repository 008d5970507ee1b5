"""SIGKILL the Redis Cluster primary that owns the queue while 10,000 jobs are enqueued and run.

A cluster of 3 primaries with a replica each; two workers and an enqueuer
pointed at nodes that survive. The primary holding the queue is killed
once a fifth of the jobs ran, while enqueues still arrive; its replica is
promoted within a few seconds; the workers log the loss, follow the new
primary and finish. What Redis's asynchronous replication costs is measured
and printed: acknowledged enqueues lost (writes the dead primary never
passed on) and jobs run twice (acknowledgements it never passed on). With
``WAIT_REPLICAS=1`` an acknowledged enqueue is on the replica before the call
returns, so none is lost. Once its replica is promoted the killed node is
started again and rejoins as the new primary's replica (until then a write
waits WAIT_TIMEOUT_MS for a replica that is not there). Runs are counted in a file, not in Redis, so the
kill cannot erase them. With ``QUEUE_PARTITIONS=3`` the queue spreads over the
three primaries and the one holding partition 0 is killed: the workers go on
with the other two partitions meanwhile, and follow partition 0 to its new
primary.
"""

from __future__ import annotations

import collections
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.cluster

from tests.helpers import Workers, wait_for
from worker.embedded.cluster import LocalCluster, local_cluster
from worker.store.enqueue import enqueue
from worker.store.heartbeats import live_workers
from worker.store.keys import GROUP, queue_partitions

JOBS = 10_000
KINDS = "tests.faults.kinds_failover"


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[LocalCluster]:
    """3 primaries, each with a replica; a killed primary's replica takes over after about 2 s."""
    with local_cluster(tmp_path / "cluster", primaries=3, replicas=True) as formed:
        yield formed


def last_delivered(client: redis.Redis, stream: str) -> bytes:
    """The last entry group ``workers`` handed out on ``stream`` (asked of the node that holds it)."""
    return next(g["last-delivered-id"] for g in client.xinfo_groups(stream) if g["name"] == GROUP.encode())


def runs(path: Path) -> collections.Counter[str]:
    return collections.Counter(path.read_text().split()) if path.exists() else collections.Counter()


class Enqueuer(threading.Thread):
    """Enqueues ``JOBS`` jobs one by one, as an application would; remembers the acknowledged ones.

    A call that fails (the primary is gone) is tried again after a pause, up to 100 times:
    the job may then be there twice (an at-least-once enqueue), never missing by our doing.
    """

    def __init__(self, url: str, prefix: str, partitions: int, wait_replicas: int) -> None:
        super().__init__(daemon=True)
        self.client = redis.cluster.RedisCluster.from_url(url)
        self.prefix = prefix
        self.partitions = partitions
        self.wait_replicas = wait_replicas
        self.acked: list[str] = []
        self.failed_calls = 0

    def run(self) -> None:
        for i in range(JOBS):
            for _attempt in range(100):
                try:
                    enqueue(
                        self.client,
                        "record_run",
                        {"job_id": f"j{i}"},
                        prefix=self.prefix,
                        partitions=self.partitions,
                        wait_replicas=self.wait_replicas,
                    )
                except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException, OSError):
                    self.failed_calls += 1
                    time.sleep(0.1)
                    continue
                self.acked.append(f"j{i}")
                break
            if i % 20 == 0:
                time.sleep(0.002)  # a steady stream, so the kill falls in the middle of it
        self.client.close()


@pytest.mark.parametrize(("partitions", "wait_replicas"), [(1, 0), (1, 1), (3, 0)])
def test_a_primary_killed_mid_run_is_followed_to_its_replica(
    replicated: LocalCluster, tmp_path: Path, partitions: int, wait_replicas: int
) -> None:
    client = redis.cluster.RedisCluster.from_url(replicated.url)
    prefix = "{failover}:" if partitions == 1 else "failover:"
    parts = queue_partitions(prefix, partitions)
    keys = parts[0]
    owner = client.get_node_from_key(keys.jobs)
    victim = next(n for n in replicated.primaries if n.port == owner.port)
    heir = replicated.replicas[replicated.primaries.index(victim)]
    survivor_url = next(f"redis://127.0.0.1:{n.port}/0" for n in replicated.primaries if n is not victim)
    ran_file = tmp_path / "runs.txt"
    pool = Workers(survivor_url, prefix, tmp_path)
    env = {
        "QUEUE_PARTITIONS": str(partitions),
        "RECLAIM_IDLE_MS": "2000",
        "RECLAIM_INTERVAL_S": "0.5",
        "FAILOVER_RUNS_FILE": str(ran_file),
        "WAIT_REPLICAS": str(wait_replicas),
    }
    enqueuer = Enqueuer(survivor_url, prefix, partitions, wait_replicas)
    try:
        procs = [pool.start(KINDS, WORKER_NAME=f"failover-{i}", **env) for i in range(2)]
        wait_for(
            lambda: {"failover-0", "failover-1"} <= live_workers(client, keys),
            timeout_s=60,
            what="both workers to start",
        )
        enqueuer.start()
        wait_for(lambda: sum(runs(ran_file).values()) >= JOBS // 5, timeout_s=120, what="a fifth of the jobs")
        victim.server.process.send_signal(signal.SIGKILL)
        victim.server.process.wait(10)
        killed_at = time.monotonic()
        done_at_kill = sum(runs(ran_file).values())
        enqueued_at_kill = len(enqueuer.acked)
        with heir.client() as c:
            wait_for(lambda: c.info("replication")["role"] == "master", timeout_s=60, what="the replica's promotion")
            promoted_s = time.monotonic() - killed_at
            delivered = last_delivered(c, keys.jobs)
            # Back as a replica of its heir (only now: without persistence, a primary restarted before the
            # failover would come back empty and wipe its replica). WAIT_REPLICAS=1 needs a replica again.
            victim.restart()
            # The killed primary's partition is served again: its heir hands out new entries.
            wait_for(
                lambda: last_delivered(c, keys.jobs) != delivered,
                timeout_s=60,
                what="the killed primary's partition to be read again",
            )
        recovered_s = time.monotonic() - killed_at
        enqueuer.join(120)
        assert not enqueuer.is_alive()
        assert len(enqueuer.acked) == JOBS

        def settled() -> bool:
            """Everything the new primary holds has run: nothing pending, nothing undelivered."""
            for p in parts:
                group = next(g for g in client.xinfo_groups(p.jobs) if g["name"] == GROUP.encode())
                if group["pending"] or group["lag"]:
                    return False
            return len(runs(ran_file)) >= JOBS - 1000

        wait_for(settled, timeout_s=120, what="every surviving job to run")
        all_done_s = time.monotonic() - killed_at
        counts = runs(ran_file)
        lost = sorted(set(enqueuer.acked) - set(counts))
        twice = sum(1 for n in counts.values() if n > 1)
        if wait_replicas:
            assert lost == [], f"acknowledged enqueues lost despite WAIT_REPLICAS={wait_replicas}: {lost[:10]}"
        # A worker whose peer ran the rest may still be in its reconnect backoff (up to 5 s): wait for its line.
        wait_for(
            lambda: all("Reconnected to Redis (node 127.0.0.1:" in pool.log(p) for p in procs),
            timeout_s=30,
            what="every worker to reconnect to the promoted replica",
        )
        logs = [pool.log(p) for p in procs]
        for text in logs:
            assert "Lost the connection to Redis" in text, text
            for bad in ("Traceback", "CROSSSLOT", "MOVED"):
                assert bad not in text, text
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            assert proc.wait(30) == 0
    finally:
        pool.stop_all()
        client.close()
    print(
        f"\nfailover figures (QUEUE_PARTITIONS={partitions}, WAIT_REPLICAS={wait_replicas}): "
        f"primary killed after {done_at_kill} jobs ran and "
        f"{enqueued_at_kill} were enqueued, of {JOBS}; replica promoted {promoted_s:.1f} s later; "
        f"its partition read again {recovered_s:.1f} s after the kill; all done "
        f"{all_done_s:.1f} s after the kill; acknowledged enqueues lost {len(lost)}; run twice {twice}; "
        f"enqueue calls that failed during the failover and were retried {enqueuer.failed_calls}"
    )
