"""Shared parts of the fault suite: the kinds module, settings that make reclaim quick, bulk enqueue,
PostgreSQL stopped and started again."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psycopg
import redis

from tests.helpers import wait_for
from worker.embedded import EmbeddedServer, postgres_user_ids
from worker.enqueue import job_fields
from worker.keys import Keys

KINDS = "tests.faults.fault_kinds"

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
