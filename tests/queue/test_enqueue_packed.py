"""enqueue's own XADD (worker.store.packed): the same entry as redis-py's, and a connection never left
holding a reply that a later command would read."""

from __future__ import annotations

import asyncio

import pytest
import redis
import redis.asyncio as aioredis

from tests.queue.test_enqueue_parked import named
from worker.store.enqueue import enqueue, enqueue_async
from worker.store.keys import Keys
from worker.store.packed import packs_for

FIELDS = {"order_id": "1042", "email": "zoë@example.com", "note": "🎫 row 12", "n": 7, "price": 12.5}


def entries(r: redis.Redis, stream: str) -> list[list[tuple[bytes, bytes]]]:
    """Each entry's fields in their stored order."""
    return [list(fields.items()) for _, fields in r.xrange(stream)]


def test_the_packed_xadd_stores_what_redis_pys_xadd_stores(redis_url: str, r: redis.Redis, prefix: str) -> None:
    single = redis.Redis.from_url(redis_url, single_connection_client=True)  # goes through redis-py's xadd
    assert packs_for(r) and not packs_for(single)
    entry_id = enqueue(r, "mail", FIELDS, prefix=prefix)  # a minted id: a job id of the caller's goes by script
    enqueue(single, "mail", FIELDS, prefix=f"{prefix}b:")
    decoded = redis.Redis.from_url(redis_url, decode_responses=True)
    assert isinstance(entry_id, str) and isinstance(enqueue(decoded, "mail", FIELDS, prefix=prefix), str)
    packed, plain = entries(r, Keys(prefix).jobs)[0], entries(r, Keys(f"{prefix}b:").jobs)[0]
    assert [pair[0] for pair in packed] == [pair[0] for pair in plain]
    assert [pair for pair in packed if pair[0] != b"job_id"] == [pair for pair in plain if pair[0] != b"job_id"]
    assert (b"note", "🎫 row 12".encode()) in packed
    single.close()
    decoded.close()
    r.delete(Keys(f"{prefix}b:").jobs)


def test_a_killed_connection_is_replaced_and_the_job_added_once(redis_url: str, r: redis.Redis, prefix: str) -> None:
    client = redis.Redis.from_url(redis_url, client_name=f"{prefix}victim")
    enqueue(client, "noop", {"job_id": "before"}, prefix=prefix)
    victims = named(r, f"{prefix}victim")  # the parked one among them
    for victim in victims:
        r.client_kill_filter(_id=victim)
    enqueue(client, "noop", {"job_id": "after"}, prefix=prefix)
    now = named(r, f"{prefix}victim")
    assert victims and now and not set(now) & set(victims)
    assert [f[b"job_id"] for _, f in r.xrange(Keys(prefix).jobs)] == [b"before", b"after"]
    client.close()


def test_a_cancelled_async_enqueue_leaves_no_reply_for_the_next_command(redis_url: str, prefix: str) -> None:
    async def main() -> tuple[bool, str]:
        client = aioredis.Redis.from_url(redis_url, max_connections=1)
        admin = aioredis.Redis.from_url(redis_url)
        await admin.execute_command("CLIENT", "PAUSE", 2000, "WRITE")  # the XADD waits for the server
        try:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(enqueue_async(client, "noop", {"job_id": "cancelled"}, prefix=prefix), 0.2)
        finally:
            await admin.execute_command("CLIENT", "UNPAUSE")
        pong = await client.ping()  # on the pool's one connection: its own reply, not the XADD's
        entry_id = await enqueue_async(client, "noop", {"job_id": "next"}, prefix=prefix)
        await client.aclose()
        await admin.aclose()
        return pong, entry_id

    pong, entry_id = asyncio.run(main())
    assert pong is True and "-" in entry_id
