"""PostgreSQL unavailable for 10 s while render_tickets and expire_holds run.

A PostgreSQL of the test's own (embedded, in a temp folder) is stopped under a
running Stagedoor worker, jobs are enqueued while it is away, and it is started
again on the same port and socket 10 s later. The worker stays up; each job
either completes or, when its attempts ran out during the outage, is
dead-lettered as its kind's policy says (render_tickets: 1 retry;
expire_holds: none, the next minute's tick covers it) with the connection
error named; nothing is lost: after PostgreSQL returns, replaying the dead
render_tickets jobs and the next expire_holds tick complete the work.
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

import opslib
from stagedoor.schema import migrate_url
from stagedoor.standins import start_mail
from tests.faults.helpers import restart
from tests.helpers import Workers, wait_for
from tests.stagedoor.helpers import event_with_seats, paid_order
from worker.embedded.servers import start_postgres
from worker.store.enqueue import enqueue
from worker.store.heartbeats import live_workers
from worker.store.keys import GROUP, Keys

OUTAGE_S = 10.0
ORDERS = 12
HOLDS = 8
KINDS = "stagedoor.kinds"


def seed(url: str) -> tuple[list[int], int]:
    """Paid orders to render (their own outbox rows removed) and expired holds; (order ids, held seats)."""
    migrate_url(url)
    with psycopg.connect(url, autocommit=True) as conn:
        event, seats = event_with_seats(conn, [f"{n}{row}" for row in "AB" for n in range(1, ORDERS + HOLDS + 1)])
        orders = [paid_order(conn, event, seats[2 * i : 2 * i + 2], ref=f"pr_{i}") for i in range(ORDERS)]
        conn.execute("DELETE FROM outbox")
        held = seats[2 * ORDERS : 2 * ORDERS + HOLDS]
        for seat in held:
            conn.execute("UPDATE seats SET status = 'held', version = version + 1 WHERE id = %s", (seat,))
            conn.execute(
                "INSERT INTO holds (seat_id, buyer_email, expires_at)"
                " VALUES (%s, 'b@example.com', now() - '1 minute'::interval)",
                (seat,),
            )
    return orders, len(held)


def counts(url: str) -> tuple[int, int]:
    """(orders whose tickets are rendered, holds left)."""
    with psycopg.connect(url) as conn:
        rendered = conn.execute("SELECT count(*) FROM tickets WHERE rendered_at IS NOT NULL").fetchone()[0]
        holds = conn.execute("SELECT count(*) FROM holds").fetchone()[0]
    return rendered, holds


@pytest.mark.timeout(180)
def test_postgres_away_for_10_s_under_render_tickets_and_expire_holds(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers
) -> None:
    # Not under tmp_path: pytest makes /tmp/pytest-of-<user> private (0700) at each session's start,
    # which would lock out the unprivileged user PostgreSQL runs as when another session starts.
    pg_dir = Path(tempfile.mkdtemp(prefix="stagedoor-pg-outage-"))
    server = start_postgres(pg_dir)
    mail = start_mail()  # each render queues a "tickets ready" email
    try:
        url = server.url
        orders, held = seed(url)
        proc = workers.start(
            KINDS,
            DATABASE_URL=url,
            MAIL_API_URL=mail.url,
            SCHEDULER="off",
            WORKER_NAME="pg-fault",
            DB_POOL_TIMEOUT_S="1",  # an attempt fails after 1 s without a connection: the policies decide
        )
        wait_for(lambda: "pg-fault" in live_workers(r, keys), timeout_s=60, what="the Stagedoor worker to start")

        server.process.send_signal(signal.SIGINT)  # fast shutdown: sessions are cut, new ones refused
        server.process.wait(30)
        stopped = time.monotonic()
        for order in orders:
            enqueue(r, "render_tickets", {"order_id": str(order)}, prefix=prefix)
        enqueue(r, "expire_holds", prefix=prefix)
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - stopped)))  # the fault itself: PostgreSQL stays away
        server = restart(server, pg_dir / "postgres.log")
        back = time.monotonic()

        def settled() -> bool:
            """Nothing pending, delayed or undelivered (the group's lag is nil once entries were deleted)."""
            last = r.xinfo_groups(keys.jobs)[0]["last-delivered-id"].decode()
            undelivered = r.xrange(keys.jobs, min=f"({last}", count=1)
            return not undelivered and r.xpending(keys.jobs, GROUP)["pending"] == 0 and r.zcard(keys.delayed) == 0

        wait_for(settled, timeout_s=60, what="every job to complete or be dead-lettered")
        assert proc.poll() is None, f"the worker died:\n{workers.log(proc)[-3000:]}"
        rendered_first, holds_first = counts(url)
        dead = [{k.decode(): v.decode() for k, v in f.items()} for _, f in r.xrange(keys.dead)]
        dead_render = [d for d in dead if d["kind"] == "render_tickets"]
        dead_expire = [d for d in dead if d["kind"] == "expire_holds"]
        assert len(dead) == len(dead_render) + len(dead_expire), f"other dead entries: {dead}"
        for d in dead:
            assert d["reason"] == "exhausted"
            assert d["attempts"] == ("2" if d["kind"] == "render_tickets" else "1"), d
        assert rendered_first + len(dead_render) == ORDERS, "a render_tickets job was lost"
        assert dead_render, "no render_tickets attempt failed during a 10 s outage with a 1 s pool timeout"
        assert all("PoolTimeout" in d["error"] for d in dead), {d["error"] for d in dead}
        assert (holds_first == 0) != bool(dead_expire), "expire_holds neither ran nor was dead-lettered"

        # The pool reconnects with its own backoff; the relay (same pool) says when it works again.
        wait_for(
            lambda: "Chore outbox-relay is working again" in workers.log(proc),
            timeout_s=60,
            what="the worker's connection pool to reach PostgreSQL again",
        )
        if dead_render:
            opslib.replay_kind("render_tickets", client=r, prefix=prefix)
        enqueue(r, "expire_holds", prefix=prefix)  # the next minute's tick
        wait_for(
            lambda: counts(url) == (ORDERS, 0), timeout_s=60, what="the work to complete after PostgreSQL returned"
        )
        wait_for(settled, timeout_s=30, what="the queue to be idle")
        done_s = time.monotonic() - back
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        print(
            f"\npostgres figures: away {back - stopped:.1f} s; {ORDERS} renders + 1 expire_holds enqueued meanwhile: "
            f"{rendered_first} rendered, {len(dead_render)} render_tickets dead after 2 attempts, "
            f"{len(dead_expire)} expire_holds dead after 1; {held} holds; all work done {done_s:.1f} s after "
            f"PostgreSQL returned (replay included); worker up throughout. Errors: "
            f"{sorted({d['error'][:80] for d in dead})}"
        )
    finally:
        mail.stop()
        server.stop()
        shutil.rmtree(pg_dir, ignore_errors=True)
