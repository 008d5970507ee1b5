"""purge_idempotency_keys and purge_outbox: by age, the outbox in batches of 1,000, twice alike."""

from __future__ import annotations

import asyncio

import psycopg

from stagedoor.purges import purge_idempotency_keys, purge_outbox, purge_published
from tests.stagedoor.conftest import RunJob, make_job


def test_idempotency_keys_older_than_24_hours_go(conn: psycopg.Connection, run_job: RunJob) -> None:
    conn.execute(
        "INSERT INTO idempotency_keys (key, created_at) VALUES"
        " ('old', now() - interval '25 hours'), ('edge', now() - interval '23 hours'), ('new', now())"
    )
    for _ in range(2):
        run_job(purge_idempotency_keys, make_job("purge_idempotency_keys"))
        assert conn.execute("SELECT key FROM idempotency_keys ORDER BY key").fetchall() == [("edge",), ("new",)]


def outbox_rows(conn: psycopg.Connection, count: int, published: str | None, created: str = "0 days") -> None:
    conn.execute(
        "INSERT INTO outbox (kind, payload, created_at, published_at)"
        " SELECT 'send_email', '{}', now() - %s::interval, now() - %s::interval FROM generate_series(1, %s)",
        (created, published, count),
    )


def test_outbox_rows_published_over_7_days_ago_go_in_batches_of_1000(db: str, conn: psycopg.Connection) -> None:
    outbox_rows(conn, 2500, "8 days")
    outbox_rows(conn, 10, "6 days")
    outbox_rows(conn, 5, None, created="30 days")  # never published: kept, whatever its age

    async def purge() -> list[int]:
        async with await psycopg.AsyncConnection.connect(db, autocommit=True) as aconn:
            return await purge_published(aconn)

    assert asyncio.run(purge()) == [1000, 1000, 500]
    assert asyncio.run(purge()) == []
    assert conn.execute("SELECT count(*), count(published_at) FROM outbox").fetchone() == (15, 10)


def test_purge_outbox_handler(conn: psycopg.Connection, run_job: RunJob) -> None:
    outbox_rows(conn, 3, "8 days")
    outbox_rows(conn, 2, "1 day")
    for _ in range(2):
        run_job(purge_outbox, make_job("purge_outbox"))
        assert conn.execute("SELECT count(*) FROM outbox").fetchone() == (2,)
