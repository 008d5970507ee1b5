"""The outbox relay: rows become jobs with outbox_id; a crash between publish and mark
publishes again, loses nothing and adds no job twice; two relays share the rows; --burst waits for the outbox."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
import redis.asyncio as aioredis
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

import opslib
import stagedoor.kinds  # noqa: F401  (registered, as in the worker that runs the relay)
from stagedoor.outbox import OutboxRelay
from stagedoor.queues import BULK, CRITICAL
from stagedoor.standins import MailStandIn
from tests.helpers import Workers
from tests.stagedoor.helpers import event_with_seats, paid_order
from worker.embedded.servers import start_redis
from worker.errors import QueueRefused
from worker.store.enqueue import enqueue
from worker.store.keys import GROUP, Keys
from worker.store.scripts import Scripts
from worker.store.wire import decode_member, encode_member

STAGEDOOR = "stagedoor.kinds"


def add_rows(conn: psycopg.Connection, count: int, **payload: str) -> None:
    for i in range(count):
        conn.execute(
            "INSERT INTO outbox (kind, payload) VALUES ('send_email', %s)",
            (Jsonb({"email": f"b{i}@example.com", "template": "order_confirmation", "order_id": str(i), **payload}),),
        )


def with_relay(db: str, redis_url: str, keys: Keys, body: Callable[[OutboxRelay], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        client = aioredis.Redis.from_url(redis_url)
        async with AsyncConnectionPool(db, min_size=2, max_size=4, kwargs={"autocommit": True}) as pool:
            try:
                return await body(OutboxRelay(pool, client, keys))
            finally:
                await client.aclose()

    return asyncio.run(main())


def critical(keys: Keys) -> Keys:
    """The keys of the queue Stagedoor's emails and reminders go to (:mod:`stagedoor.queues`)."""
    return Keys(keys.prefix, queue=CRITICAL)


def jobs(r: redis.Redis, keys: Keys) -> list[dict[str, str]]:
    """The jobs for now of each of Stagedoor's queues, queue by queue (critical first): those on ``jobs``,
    oldest first, then those waiting in ``fair:queue`` for their organizer's turn (on-sale work)."""
    queues = [Keys(keys.prefix, queue=name) for name in (CRITICAL, "default", BULK)]
    return [
        job
        for q in queues
        for job in [{k.decode(): v.decode() for k, v in f.items()} for _, f in r.xrange(q.jobs)]
        + [decode_member(member) for member in r.zrange(q.fair_queue, 0, -1)]
    ]


def test_rows_become_jobs_with_their_outbox_id_and_delayed_ones_wait(
    db: str, conn: psycopg.Connection, r: redis.Redis, keys: Keys, redis_url: str
) -> None:
    add_rows(conn, 2, request_id="7f3a9c2e")
    conn.execute(
        "INSERT INTO outbox (kind, payload, run_at) VALUES"
        " ('send_reminder', '{\"order_id\": 9, \"seats\": [1, 2]}', now() + interval '1 day'),"
        " ('send_reminder', '{\"order_id\": 10}', now() - interval '1 hour')"
    )
    assert with_relay(db, redis_url, keys, lambda relay: relay.relay_once()) == 4
    assert with_relay(db, redis_url, keys, lambda relay: relay.relay_once()) == 0
    published = jobs(r, keys)
    assert [(j["kind"], j["outbox_id"], j["attempts"]) for j in published] == [
        ("send_email", "1", "0"),
        ("send_email", "2", "0"),
        ("send_reminder", "4", "0"),
    ]
    assert published[0]["request_id"] == "7f3a9c2e" and "job_id" not in published[0]
    ((member, score),) = r.zrange(critical(keys).delayed, 0, -1, withscores=True)
    # The relay runs where the application's kinds are registered (the worker), so their version is stamped.
    assert json.loads(member) == {"attempts": "0", "kind": "send_reminder", "order_id": "9", "outbox_id": "3",
                                  "seats": "[1, 2]", "v": "1"}  # fmt: skip
    assert score == pytest.approx(time.time() + 86_400, abs=60)
    assert conn.execute("SELECT count(*) FROM outbox WHERE published_at IS NULL").fetchone() == (0,)


def test_a_crash_between_publish_and_mark_publishes_again_adding_nothing_twice(
    db: str, conn: psycopg.Connection, r: redis.Redis, keys: Keys, redis_url: str
) -> None:
    add_rows(conn, 5)

    async def crash_after_publish(relay: OutboxRelay) -> None:
        with pytest.raises(RuntimeError):
            async with relay.pool.connection() as aconn, aconn.transaction():
                await relay.publish(await relay.claim(aconn))
                raise RuntimeError("the process died here")  # the transaction rolls back: no mark

    with_relay(db, redis_url, keys, crash_after_publish)
    assert with_relay(db, redis_url, keys, lambda relay: relay.has_unpublished()) is True
    assert with_relay(db, redis_url, keys, lambda relay: relay.relay_once()) == 5
    assert Counter(j["outbox_id"] for j in jobs(r, keys)) == {str(i): 1 for i in range(1, 6)}  # idempotent enqueue
    assert with_relay(db, redis_url, keys, lambda relay: relay.has_unpublished()) is False


def test_two_relays_at_once_publish_disjoint_rows(
    db: str, conn: psycopg.Connection, r: redis.Redis, keys: Keys, redis_url: str
) -> None:
    add_rows(conn, 10)

    async def side_by_side(relay: OutboxRelay) -> tuple[int, int]:
        async with relay.pool.connection() as aconn, aconn.transaction():
            mine = await relay.claim(aconn, limit=5)  # locked until this transaction ends
            other = await relay.relay_once()  # a second worker's relay, meanwhile
            await relay.publish(mine)
            await relay.mark(aconn, mine)
        return len(mine), other

    assert with_relay(db, redis_url, keys, side_by_side) == (5, 5)
    assert sorted(int(j["outbox_id"]) for j in jobs(r, keys)) == list(range(1, 11))


def test_burst_drains_the_outbox_before_it_exits(
    db: str, conn: psycopg.Connection, keys: Keys, workers: Workers, mail: MailStandIn
) -> None:
    add_rows(conn, 3)
    workers.burst(STAGEDOOR, DATABASE_URL=db, MAIL_API_URL=mail.url)
    assert conn.execute("SELECT count(*) FROM outbox WHERE published_at IS NULL").fetchone() == (0,)
    assert sorted(m["key"] for m in mail.messages()) == ["outbox:1", "outbox:2", "outbox:3"]


def test_the_relay_publishes_what_the_enqueue_api_makes_of_its_rows(
    db: str, conn: psycopg.Connection, r: redis.Redis, keys: Keys, redis_url: str
) -> None:
    later = conn.execute("SELECT now() + interval '1 day'").fetchone()[0]  # type: ignore[index]
    conn.execute(
        "INSERT INTO outbox (kind, payload, run_at) VALUES"
        ' (\'send_email\', \'{"email": "a@example.com", "order_id": 7}\', NULL),'
        " ('send_reminder', '{\"order_id\": 9, \"seats\": [1, 2]}', %s),"
        " ('send_reminder', '{\"order_id\": 10}', now() - interval '1 hour')",
        (later,),
    )
    assert with_relay(db, redis_url, keys, lambda relay: relay.relay_once()) == 3

    api = Keys(keys.prefix + "api:")  # the same jobs through enqueue(), on a queue of their own
    enqueue(r, "send_email", {"email": "a@example.com", "order_id": "7", "outbox_id": "1"}, prefix=api.prefix)
    enqueue(r, "send_reminder", {"order_id": "9", "seats": "[1, 2]", "outbox_id": "2"}, run_at=later, prefix=api.prefix)
    enqueue(r, "send_reminder", {"order_id": "10", "outbox_id": "3"}, prefix=api.prefix)  # its run_at has passed
    assert jobs(r, keys) == jobs(r, api)
    delayed = [r.zrange(critical(k).delayed, 0, -1, withscores=True) for k in (keys, api)]
    assert delayed[0] == delayed[1] and len(delayed[0]) == 1
    assert all("job_id" not in job for job in jobs(r, keys))  # the outbox id is the job's identity


def test_a_relayed_job_shows_one_job_id_pending_delayed_and_dead(
    db: str, conn: psycopg.Connection, r: redis.Redis, keys: Keys, redis_url: str
) -> None:
    add_rows(conn, 1)
    assert with_relay(db, redis_url, keys, lambda relay: relay.relay_once()) == 1
    at = {"client": r, "prefix": keys.prefix}
    keys = critical(keys)  # send_email's queue
    scripts = Scripts(r, keys)
    r.xgroup_create(keys.jobs, GROUP, id="0")

    def deliver() -> tuple[str, dict[str, str]]:
        [(_stream, [(entry_id, raw)])] = r.xreadgroup(GROUP, "worker-1", {keys.jobs: ">"}, count=1)
        return entry_id.decode(), {k.decode(): v.decode() for k, v in raw.items()}

    entry_id, fields = deliver()  # running
    assert opslib.pending(**at)["job_id"].tolist() == ["1"]

    # The handler failed: the retry move, with the member the worker builds.
    scripts.retry(entry_id, time.time() + 3600, encode_member({**fields, "attempts": "1"}))
    assert opslib.pending(**at).empty
    assert opslib.delayed(**at)["job_id"].tolist() == ["1"]

    # Due again, delivered, failed for good: the bury move, with the fields the worker adds.
    scripts.promote(time.time() + 7200)
    entry_id, _fields = deliver()
    scripts.bury(entry_id, {"attempts": "2", "error": "MailRejected: 550", "reason": "exhausted"}, maxlen=1000)
    assert opslib.delayed(**at).empty
    dead = opslib.dead_letters(**at)
    assert dead[["job_id", "outbox_id", "attempts"]].values.tolist() == [["1", "1", 2]]


def test_a_redis_that_refuses_writes_leaves_the_rows_unpublished_until_it_accepts_them(
    db: str, conn: psycopg.Connection, tmp_path: Path, prefix: str
) -> None:
    server = start_redis(tmp_path / "full")
    try:
        full = redis.Redis.from_url(server.url)
        full.config_set("maxmemory", max(1, int(full.info("memory")["used_memory"]) // 2))
        keys = Keys(prefix)
        add_rows(conn, 3)
        with pytest.raises(QueueRefused, match=r"Redis refuses writes \(OOM: out of memory"):
            with_relay(db, server.url, keys, lambda relay: relay.relay_once())
        assert conn.execute("SELECT count(*) FROM outbox WHERE published_at IS NULL").fetchone() == (3,)
        full.config_set("maxmemory", 0)
        assert with_relay(db, server.url, keys, lambda relay: relay.relay_once()) == 3
        assert len(jobs(full, keys)) == 3
        assert conn.execute("SELECT count(*) FROM outbox WHERE published_at IS NULL").fetchone() == (0,)
    finally:
        server.stop()


def test_the_relay_carries_the_requests_trace_context_stored_with_the_rows(
    db: str, conn: psycopg.Connection, r: redis.Redis, keys: Keys, redis_url: str
) -> None:
    """A checkout inside a span (the API's own span object: no SDK needed) stores its context with the
    outbox rows; the relay, later and in no span, writes it into each job."""
    trace = pytest.importorskip("opentelemetry.trace", reason="the otel extra is not installed")

    request = trace.SpanContext(
        0x0AF7651916CD43DD8448EB211C80319C,
        0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=trace.TraceFlags(1),
        trace_state=trace.TraceState([("shop", "checkout")]),
    )
    event, seats = event_with_seats(conn, ["A1"], starts_at=datetime.now(UTC) + timedelta(hours=5))
    with trace.use_span(trace.NonRecordingSpan(request)):
        paid_order(conn, event, seats)
    untraced = event_with_seats(conn, ["B1"], starts_at=datetime.now(UTC) + timedelta(hours=5))
    paid_order(conn, untraced[0], untraced[1], ref="pr_2")
    assert with_relay(db, redis_url, keys, lambda relay: relay.relay_once()) == 6
    published = jobs(r, keys)
    traced = [job for job in published if "traceparent" in job]
    assert sorted(job["kind"] for job in traced) == ["render_tickets", "send_email", "send_reminder"]
    for job in traced:
        assert job["traceparent"] == "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        assert job["tracestate"] == "shop=checkout"
    assert len(published) == 6


def test_on_sale_work_takes_its_organizers_turns(
    db: str, conn: psycopg.Connection, r: redis.Redis, keys: Keys, redis_url: str
) -> None:
    """A paid order's confirmation and tickets carry the event's organizer as their fair key (one organizer's
    on-sale takes turns with the others'); the reminder, for later, has none."""
    event, seats = event_with_seats(conn, ["1A", "1B"], starts_at=datetime.now(UTC) + timedelta(days=3))
    paid_order(conn, event, seats)
    (organizer,) = conn.execute("SELECT organizer_id FROM events WHERE id = %s", (event,)).fetchone()  # type: ignore[misc]
    assert with_relay(db, redis_url, keys, lambda relay: relay.relay_once()) == 3
    published = jobs(r, keys)
    assert {(j["kind"], j.get("fair_key")) for j in published} == {
        ("send_email", f"organizer-{organizer}"),
        ("render_tickets", f"organizer-{organizer}"),
    }
    ((member, _),) = r.zrange(critical(keys).delayed, 0, -1, withscores=True)
    assert json.loads(member)["kind"] == "send_reminder" and "fair_key" not in json.loads(member)
