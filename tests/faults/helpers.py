"""Shared parts of the fault suite: the kinds module, settings that make reclaim quick, bulk enqueue,
dead letters added directly, the archive's row counts, PostgreSQL stopped and started again."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psycopg
import redis

from tests.helpers import wait_for
from worker.embedded.servers import EmbeddedServer, postgres_user_ids
from worker.store.enqueue import job_fields
from worker.store.keys import Keys

KINDS = "tests.faults.kinds_faults"

#: Reclaim after 1 s idle, looked for every 0.2 s: a killed worker's entries come back quickly.
FAST_RECLAIM = {"RECLAIM_IDLE_MS": "1000", "RECLAIM_INTERVAL_S": "0.2"}


def enqueue_many(client: redis.Redis, keys: Keys, kind: str, count: int, **fields: str) -> list[str]:
    """Add ``count`` jobs with job ids ``j0``, ``j1``, ... in pipelined chunks; return the job ids."""
    ids = [f"j{i}" for i in range(count)]
    for low in range(0, count, 1000):
        pipe = client.pipeline(transaction=False)
        for job_id in ids[low : low + 1000]:
            pipe.xadd(keys.jobs, job_fields(kind, {"job_id": job_id, **fields}))
        pipe.execute()
    return ids


def add_dead(client: redis.Redis, keys: Keys, count: int) -> list[str]:
    """Add ``count`` dead letters of kind ``record`` (job ids ``d0``, ``d1``, ...) to ``jobs:dead`` in one
    pipeline; return their dead ids."""
    pipe = client.pipeline(transaction=False)
    for i in range(count):
        pipe.xadd(
            keys.dead,
            {"kind": "record", "job_id": f"d{i}", "attempts": "1", "error": "ValueError: on purpose",
             "traceback": "", "reason": "exhausted", "failed_at": "2026-11-30T21:14:00.000Z", "worker": "w"},
        )  # fmt: skip
    return [entry_id.decode() for entry_id in pipe.execute()]


def archived(url: str, prefix: str) -> tuple[int, int]:
    """Rows and distinct dead ids archived for the queue; (0, 0) before a worker created the table."""
    with psycopg.connect(url) as conn:
        try:
            found = conn.execute(
                "SELECT count(*), count(DISTINCT dead_id) FROM dead_letters WHERE queue = %s", (prefix,)
            ).fetchone()
        except psycopg.errors.UndefinedTable:
            return 0, 0
    assert found is not None
    return int(found[0]), int(found[1])


def restart(server: EmbeddedServer, log: Path) -> EmbeddedServer:
    """Start PostgreSQL again with the same data, port and socket folder as ``server`` had."""
    ids = postgres_user_ids()
    user = {} if ids is None else {"user": ids[0], "group": ids[1], "extra_groups": []}
    with open(log, "ab") as out:
        proc = subprocess.Popen(server.process.args, stdin=subprocess.DEVNULL, stdout=out, stderr=out, **user)
    again = EmbeddedServer("postgres", server.url, proc, cleanup=server.cleanup)
    wait_for(lambda: reachable(again.url), timeout_s=30, what="PostgreSQL to accept connections again")
    return again


def reachable(url: str) -> bool:
    try:
        psycopg.connect(url, connect_timeout=1).close()
    except psycopg.OperationalError:
        return False
    return True
