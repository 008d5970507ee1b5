"""enqueue_async's own round trip (worker.store.async_round_trip): the socket timeout through one watch a
connection, error replies, RESP3 pushes, and a script the server lost (a guarded and a fair enqueue's)."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis
import redis.asyncio as aioredis

from worker.store.async_round_trip import round_trip
from worker.store.enqueue import enqueue, enqueue_async
from worker.store.fair import FAIR_FIELD
from worker.store.keys import Keys
from worker.store.packed import command
from worker.store.wire import decode_member


async def connection(client: aioredis.Redis) -> object:
    """A connection of ``client``'s pool, open."""
    conn = await client.connection_pool.get_connection()
    await conn.connect()
    return conn


def test_a_reply_past_the_socket_timeout_raises_and_closes_the_connection(redis_url: str, prefix: str) -> None:
    async def main() -> tuple[float, bool, object]:
        client = aioredis.Redis.from_url(redis_url, socket_timeout=0.3)
        admin = aioredis.Redis.from_url(redis_url)
        conn = await connection(client)
        await admin.execute_command("CLIENT", "PAUSE", 3000, "WRITE")  # the XADD waits for the server
        started = time.monotonic()
        try:
            with pytest.raises(redis.exceptions.TimeoutError):
                await round_trip(conn, command("XADD", Keys(prefix).jobs, "*", "kind", "noop"))
            waited = time.monotonic() - started
            connected = conn.is_connected
        finally:
            await admin.execute_command("CLIENT", "UNPAUSE")
        await conn.connect()
        pong = await round_trip(conn, command("PING"))  # its own reply, not the XADD's
        await client.connection_pool.release(conn)
        await client.aclose()
        await admin.aclose()
        return waited, connected, pong

    waited, connected, pong = asyncio.run(main())
    assert 0.25 < waited < 2.0 and not connected and pong == b"PONG"


def test_reads_go_on_past_the_watchs_first_deadline(redis_url: str, prefix: str) -> None:
    """The watch's timer, armed by the first read, fires while later reads are in time: it re-arms."""

    async def main() -> tuple[int, bool]:
        client = aioredis.Redis.from_url(redis_url, socket_timeout=0.2)
        conn = await connection(client)
        done, until = 0, time.monotonic() + 0.8  # four of the first read's deadlines
        while time.monotonic() < until:
            await round_trip(conn, command("XADD", Keys(prefix).jobs, "*", "kind", "noop"))
            done += 1
        connected = conn.is_connected
        await client.connection_pool.release(conn)
        await client.aclose()
        return done, connected

    done, connected = asyncio.run(main())
    assert done > 4 and connected


def test_an_error_reply_raises_and_leaves_the_connection_usable(redis_url: str, r: redis.Redis, prefix: str) -> None:
    r.set(f"{prefix}text", "not a stream")

    async def main() -> tuple[bool, object]:
        client = aioredis.Redis.from_url(redis_url)
        conn = await connection(client)
        with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
            await round_trip(conn, command("XADD", f"{prefix}text", "*", "kind", "noop"))
        connected = conn.is_connected
        pong = await round_trip(conn, command("PING"))
        await client.connection_pool.release(conn)
        await client.aclose()
        return connected, pong

    connected, pong = asyncio.run(main())
    assert connected and pong == b"PONG"
    r.delete(f"{prefix}text")


def test_a_resp3_push_before_the_reply_is_handed_on(redis_url: str, r: redis.Redis, prefix: str) -> None:
    async def main() -> object:
        client = aioredis.Redis.from_url(redis_url, protocol=3)
        conn = await connection(client)
        await round_trip(conn, command("CLIENT", "TRACKING", "on"))
        await round_trip(conn, command("GET", f"{prefix}tracked"))
        r.set(f"{prefix}tracked", "changed")  # the server pushes an invalidation to conn, before the PING's reply
        pong = await round_trip(conn, command("PING"))
        await client.connection_pool.release(conn)
        await client.aclose()
        return pong

    assert asyncio.run(main()) == b"PONG"
    r.delete(f"{prefix}tracked")


def test_a_guarded_async_enqueue_after_script_flush_loads_the_script_again(
    redis_url: str, r: redis.Redis, prefix: str
) -> None:
    async def main() -> list[str]:
        client = aioredis.Redis.from_url(redis_url)
        first = await enqueue_async(client, "noop", {"n": 1}, prefix=prefix, job_id="before")
        await client.script_flush()
        second = await enqueue_async(client, "noop", {"n": 2}, prefix=prefix, job_id="after")
        again = await enqueue_async(client, "noop", {"n": 3}, prefix=prefix, job_id="after")
        await client.aclose()
        return [first, second, again]

    first, second, again = asyncio.run(main())
    stored = r.xrange(Keys(prefix).jobs)
    assert [fields[b"job_id"] for _, fields in stored] == [b"before", b"after"]
    assert [entry_id.decode() for entry_id, _ in stored] == [first, second] and again == second


def test_a_fair_enqueue_after_script_flush_loads_the_script_again(redis_url: str, r: redis.Redis, prefix: str) -> None:
    """A fair job's packed EVALSHA (worker.store.fair.fair_evalsha), sync and asyncio, on a server that lost it."""
    client = redis.Redis.from_url(redis_url)
    first = enqueue(client, "noop", {"n": 1}, prefix=prefix, fair_key="org-1")
    r.script_flush()
    second = enqueue(client, "noop", {"n": 2}, prefix=prefix, fair_key="org-2")
    client.close()

    async def main() -> str:
        async_client = aioredis.Redis.from_url(redis_url)
        await async_client.script_flush()
        third = await enqueue_async(async_client, "noop", {"n": 3}, prefix=prefix, fair_key="org-3")
        await async_client.aclose()
        return third

    third = asyncio.run(main())
    waiting = {
        decode_member(m)["job_id"]: decode_member(m)[FAIR_FIELD] for m in r.zrange(Keys(prefix).fair_queue, 0, -1)
    }
    assert waiting == {first: "org-1", second: "org-2", third: "org-3"}
