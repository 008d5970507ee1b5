"""The archive's PostgreSQL away for 30 s while 5,000 jobs are dead-lettered with DEAD_MAXLEN=1000.

A PostgreSQL of the test's own (embedded, in a temp folder) is the archive of
a running worker. It is stopped, 5,000 failing jobs are enqueued and
dead-lettered while it is away (``jobs:dead`` grows past its cap: nothing
unarchived may be trimmed), and it is started again on the same port and
socket 30 s after it stopped. Then every one of the 5,000 is in the archive
exactly once, nothing was evicted, and the stream is trimmed back to the cap.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
import time
from pathlib import Path

import psycopg
import pytest
import redis

from tests.faults.helpers import KINDS, archived, enqueue_many, restart
from tests.helpers import Workers, wait_for
from worker.archive.table import migrate_url
from worker.embedded.servers import start_postgres
from worker.store.heartbeats import live_workers
from worker.store.keys import ARCHIVE_GROUP, Keys

OUTAGE_S = 30.0
DEAD = 5_000
CAP = 1_000


@pytest.mark.timeout(240)
def test_postgres_away_for_30_s_while_5000_jobs_die_loses_and_evicts_nothing(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers
) -> None:
    # Not under tmp_path: see test_postgres_outage (the unprivileged PostgreSQL user must reach it).
    pg_dir = Path(tempfile.mkdtemp(prefix="stagedoor-archive-outage-"))
    server = start_postgres(pg_dir)
    try:
        url = server.url
        migrate_url(url)
        proc = workers.start(KINDS, ARCHIVE_URL=url, DEAD_MAXLEN=str(CAP), SCHEDULER="off", WORKER_NAME="arch")
        wait_for(lambda: "arch" in live_workers(r, keys), timeout_s=60, what="the worker to start")

        server.process.send_signal(signal.SIGINT)  # fast shutdown: sessions cut, new ones refused
        server.process.wait(30)
        stopped = time.monotonic()
        enqueue_many(r, keys, "fail", DEAD)
        wait_for(lambda: r.xlen(keys.dead) == DEAD, timeout_s=90, what="all 5,000 jobs to be dead-lettered")
        grown = r.xlen(keys.dead)
        assert int(r.get(keys.dead_evicted) or 0) == 0
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - stopped)))  # the fault itself: PostgreSQL stays away
        assert r.xlen(keys.dead) == DEAD, "an entry was trimmed before it was archived"
        server = restart(server, pg_dir / "postgres.log")
        back = time.monotonic()

        wait_for(lambda: archived(url, prefix)[0] >= DEAD, timeout_s=60, what="the 5,000 entries in the archive")
        archived_s = time.monotonic() - back
        wait_for(lambda: r.xlen(keys.dead) <= CAP, timeout_s=30, what="jobs:dead trimmed back to DEAD_MAXLEN")
        rows, distinct = archived(url, prefix)
        assert rows == distinct == DEAD
        with psycopg.connect(url) as conn:
            jobs = {row[0] for row in conn.execute("SELECT job_id FROM dead_letters WHERE queue = %s", (prefix,))}
        assert jobs == {f"j{i}" for i in range(DEAD)}
        assert int(r.get(keys.dead_evicted) or 0) == 0
        assert r.xpending(keys.dead, ARCHIVE_GROUP)["pending"] == 0
        assert proc.poll() is None, f"the worker died:\n{workers.log(proc)[-3000:]}"
        log = workers.log(proc)
        assert "Chore archive lost its connection" in log and "Chore archive is working again" in log
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        print(
            f"\narchive outage figures: PostgreSQL away {back - stopped:.1f} s; {DEAD} dead-lettered meanwhile, "
            f"jobs:dead grew to {grown} (DEAD_MAXLEN {CAP}), 0 evicted; all {rows} archived once "
            f"{archived_s:.1f} s after it returned; stream trimmed back to {r.xlen(keys.dead)}"
        )
    finally:
        server.stop()
        shutil.rmtree(pg_dir, ignore_errors=True)
