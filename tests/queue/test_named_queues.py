"""Named queues on one server, with real worker processes: weighted shares of starts, strict order, a
worker that leaves alone a queue it does not serve, and a job of ``bulk`` that retries, dies and is
replayed without leaving ``bulk``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
import redis

import opslib
import worker
from tests.helpers import Workers, wait_for
from tests.queue import kinds_queues  # noqa: F401 - declares q_bulk_fails in bulk for this process's enqueue
from tests.queue.helpers_queues import KINDS, SERVED, WEIGHTS, fill, longest_gap, lowest_window_share, shares, starts_of
from worker.store.keys import GROUP, Keys
from worker.store.queues import DECLARED_QUEUES, parse_served, queue_for
from worker.store.roles import ROLES

STARTS = 3000


def test_keys_of_default_are_unchanged_and_a_named_queue_has_its_own() -> None:
    assert (Keys("p:").jobs, Keys("p:").delayed, Keys("p:").dead) == ("p:jobs", "p:delayed", "p:jobs:dead")
    bulk = Keys("p:", queue="bulk")
    assert (bulk.jobs, bulk.delayed, bulk.dead) == ("p:q:bulk:jobs", "p:q:bulk:delayed", "p:q:bulk:jobs:dead")
    assert Keys("p:", "p0-1", 0, "bulk").jobs == "p:q:bulk:{p0-1}:jobs"
    assert bulk.workers == Keys("p:").workers and bulk.throttles == Keys("p:").throttles  # queue-wide


def test_the_queue_a_job_goes_to_and_bad_names() -> None:
    assert DECLARED_QUEUES["q_bulk_fails"] == "bulk"
    assert queue_for("q_bulk_fails", None) == "bulk" and queue_for("q_bulk_fails", "critical") == "critical"
    assert queue_for("never_declared", None) == "default"
    with pytest.raises(ValueError, match="is not a queue name"):
        queue_for("q_start", "Bulk:1")
    assert [(q.name, q.weight) for q in parse_served("critical:6, default:3,bulk")] == [
        ("critical", 6),
        ("default", 3),
        ("bulk", 1),
    ]
    with pytest.raises(ValueError, match="names bulk twice"):
        parse_served("bulk,bulk:2")
    with pytest.raises(ValueError, match="must be a whole number from 1 to 1000"):
        parse_served("bulk:0")


def test_weighted_shares_of_starts_are_within_five_points_and_bulk_is_never_starved(
    r: redis.Redis, prefix: str, workers: Workers
) -> None:
    fill(r, prefix, {"critical": 2500, "default": 1500, "bulk": 800})  # every queue has work throughout
    starts = starts_of(r, prefix, workers, STARTS, WORKER_QUEUES=SERVED, WORKER_CONCURRENCY="4")[:STARTS]
    got = shares(starts)
    for queue, weight in WEIGHTS.items():
        assert abs(got[queue] - 10 * weight) <= 5, got
    assert lowest_window_share(starts, "bulk") >= 5, "bulk (weight 1 of 10) is never starved"
    assert longest_gap(starts, "bulk") < 500


def test_strict_order_drains_the_first_queue_before_the_next(r: redis.Redis, prefix: str, workers: Workers) -> None:
    fill(r, prefix, {"critical": 300, "default": 300})
    env = {"WORKER_QUEUES": "critical,default", "WORKER_QUEUE_ORDER": "strict", "WORKER_CONCURRENCY": "4"}
    starts = starts_of(r, prefix, workers, 600, **env)
    assert starts[:300] == ["critical"] * 300 and starts[300:600] == ["default"] * 300


def test_a_worker_never_runs_a_queue_it_does_not_serve(r: redis.Redis, prefix: str, workers: Workers) -> None:
    fill(r, prefix, {"default": 20, "bulk": 30})
    workers.burst(KINDS, WORKER_QUEUES="default")
    assert r.lrange(f"{prefix}test:starts", 0, -1) == [b"default"] * 20
    stats = opslib.queue_stats(client=r, prefix=prefix)
    assert stats.by_queue["stream_length"].to_dict() == {"default": 20, "bulk": 30} and stats.stream_length == 50
    assert "by queue:" in repr(stats)
    bulk = Keys(prefix, queue="bulk")
    assert r.xlen(bulk.jobs) == 30 and not r.exists(f"{bulk.jobs}:never")
    assert not r.xinfo_groups(bulk.jobs), "nobody read bulk: no consumer group on it"
    workers.burst(KINDS, WORKER_QUEUES="bulk")
    assert r.llen(f"{prefix}test:starts") == 50


def test_a_bulk_job_retries_dies_and_is_replayed_in_bulk(
    r: redis.Redis, prefix: str, workers: Workers, tmp_path: Path
) -> None:
    worker.enqueue(r, "q_bulk_fails", {"order_id": "o1"}, prefix=prefix)  # the kind's declared queue
    bulk, default = Keys(prefix, queue="bulk"), Keys(prefix)
    assert r.xlen(bulk.jobs) == 1 and not r.exists(default.jobs)
    workers.burst(KINDS, WORKER_QUEUES="bulk")
    assert r.lrange(f"{prefix}test:starts", 0, -1) == [b"bulk:0", b"bulk:1"]  # retried in bulk's delayed
    assert r.xlen(bulk.dead) == 1 and not r.exists(default.dead) and not r.exists(default.delayed)
    dead = opslib.dead_letters(client=r, prefix=prefix)
    assert dead["queue"].tolist() == ["bulk"] and dead["kind"].tolist() == ["q_bulk_fails"]
    replayed = opslib.replay(dead, client=r, prefix=prefix)
    assert replayed["status"].tolist() == ["replayed"], replayed
    assert r.xlen(bulk.dead) == 0 and not r.exists(default.jobs)
    workers.burst(KINDS, WORKER_QUEUES="bulk")
    assert r.xlen(bulk.dead) == 1 and r.llen(f"{prefix}test:starts") == 4


def test_the_archive_keeps_a_bulk_dead_letter_under_its_queue(
    r: redis.Redis, prefix: str, workers: Workers, archive_url: str
) -> None:
    worker.enqueue(r, "q_bulk_fails", {"order_id": "o2"}, prefix=prefix)
    workers.burst(KINDS, WORKER_QUEUES="bulk")
    bulk = Keys(prefix, queue="bulk")
    dead_id = r.xrange(bulk.dead)[0][0].decode()

    def archived() -> list[tuple[str, int, str]]:
        with psycopg.connect(archive_url) as conn:
            query = "SELECT queue, partition, kind FROM dead_letters WHERE dead_id = %s AND queue LIKE %s"
            return conn.execute(query, (dead_id, f"{prefix}%")).fetchall()

    wait_for(archived, timeout_s=30, what="the bulk dead letter archived")
    assert archived() == [(f"{prefix}q:bulk:", 0, "q_bulk_fails")]
    frame = opslib.archive(conn=None, prefix=bulk.queue_prefix)
    assert frame["queue"].tolist() == ["bulk"]


def test_the_roles_cover_every_queue_and_keys_lists_each_served_queue(prefix: str) -> None:
    for role in ROLES.values():
        scopes = [rule for rule in role.rules(prefix) if "~" in rule]
        assert scopes and all(rule.endswith(f"~{prefix}*") for rule in scopes)  # q:<name>:... is under it
    env = {**os.environ, "QUEUE_PREFIX": prefix, "WORKER_QUEUES": "critical,bulk"}
    done = subprocess.run([sys.executable, "-m", "worker", "keys"], env=env, capture_output=True, text=True, timeout=60)
    lines = done.stdout.splitlines()
    assert [line.split()[1] for line in lines] == ["critical", "bulk"], done.stdout + done.stderr
    assert f"{prefix}q:bulk:jobs:dead" in lines[1]


def test_a_killed_workers_bulk_job_is_reclaimed_in_bulk(r: redis.Redis, prefix: str, workers: Workers) -> None:
    fast = {"RECLAIM_IDLE_MS": "1000", "RECLAIM_INTERVAL_S": "0.2", "WORKER_QUEUES": "bulk"}
    worker.enqueue(r, "q_hangs_once", {"job_id": "h1"}, prefix=prefix)  # the kind's declared queue: bulk
    bulk = Keys(prefix, queue="bulk")
    victim = workers.start(KINDS, WORKER_NAME="victim", **fast)
    wait_for(lambda: r.get(f"{prefix}test:runs:h1") == b"1", what="the first run to hang")
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    assert r.xpending(bulk.jobs, GROUP)["pending"] == 1
    survivor = workers.start(KINDS, WORKER_NAME="survivor", **fast)
    wait_for(lambda: r.lrange(f"{prefix}test:starts", 0, -1) == [b"bulk:reclaimed"], what="the reclaim's run")
    wait_for(lambda: r.xpending(bulk.jobs, GROUP)["pending"] == 0, what="the reclaimed entry acknowledged")
    survivor.send_signal(signal.SIGTERM)
    assert survivor.wait(30) == 0
    assert "Reclaimed entry" in workers.log(survivor)
    assert r.xlen(Keys(prefix).jobs) == 0 and r.xlen(bulk.dead) == 0
