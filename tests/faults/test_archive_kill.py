"""A worker SIGKILLed in the middle of archiving: no row lost, none duplicated.

20,000 dead entries (2 KB tracebacks) wait in ``jobs:dead``; a worker starts
archiving them and is killed as soon as the first rows are in PostgreSQL,
with a batch read and not acknowledged (or committed and not acknowledged).
A second worker takes over the dead one's pending entries once they are idle
beyond RECLAIM_IDLE_MS, and finishes: every entry is in the archive once.
"""

from __future__ import annotations

import signal

import psycopg
import pytest
import redis

from tests.faults.helpers import FAST_RECLAIM, KINDS, archived
from tests.helpers import Workers, wait_for
from worker.store.keys import ARCHIVE_GROUP, Keys

DEAD = 20_000
TRACEBACK = ("Traceback (most recent call last):\n" + '  File "render.py", line 88, in barcode_for\n' * 60)[:2048]


def fill_dead(r: redis.Redis, keys: Keys, count: int) -> list[str]:
    ids: list[str] = []
    for low in range(0, count, 1000):
        pipe = r.pipeline(transaction=False)
        for i in range(low, min(count, low + 1000)):
            pipe.xadd(
                keys.dead,
                {"kind": "fail", "job_id": f"d{i}", "attempts": "1", "error": f"ValueError: order {i} failed",
                 "traceback": TRACEBACK, "reason": "exhausted", "failed_at": "2026-11-30T21:14:00.000Z",
                 "worker": "w"},
            )  # fmt: skip
        ids += [entry_id.decode() for entry_id in pipe.execute()]
    return ids


@pytest.mark.timeout(180)
def test_a_worker_killed_while_archiving_loses_and_duplicates_no_row(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers, archive_url: str
) -> None:
    dead_ids = fill_dead(r, keys, DEAD)
    proc = workers.start(KINDS, WORKER_NAME="archiver-a", SCHEDULER="off", **FAST_RECLAIM)
    wait_for(lambda: archived(archive_url, prefix)[0] > 0, timeout_s=60, what="the first archived rows")
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    at_kill = archived(archive_url, prefix)[0]
    orphans = r.xpending_range(keys.dead, ARCHIVE_GROUP, min="-", max="+", count=DEAD, consumername="archiver-a")
    assert at_kill < DEAD, "the worker finished before it was killed: nothing was tested"

    workers.burst(KINDS, WORKER_NAME="archiver-b", timeout_s=120, **FAST_RECLAIM)
    rows, distinct = archived(archive_url, prefix)
    assert rows == distinct == DEAD
    with psycopg.connect(archive_url) as conn:
        ids = {row[0] for row in conn.execute("SELECT dead_id FROM dead_letters WHERE queue = %s", (prefix,))}
    assert ids == set(dead_ids)
    assert r.xpending(keys.dead, ARCHIVE_GROUP)["pending"] == 0
    print(
        f"\narchive kill figures: {DEAD} dead entries; the archiver was SIGKILLed with {at_kill} rows written and "
        f"{len(orphans)} entries read but not acknowledged; after a second worker: {rows} rows, {distinct} distinct"
    )
