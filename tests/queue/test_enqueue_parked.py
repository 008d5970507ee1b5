"""The connection a pool keeps parked for enqueue's packed sends (worker.store.parked): threads, tasks, fork,
a lost connection, close, small pools, a dropped client."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import weakref

import redis
import redis.asyncio as aioredis

from tests.faults.helpers_proxy import Proxy
from tests.helpers import wait_for
from worker.store import parked
from worker.store.enqueue import enqueue, enqueue_async
from worker.store.keys import Keys


def named(r: redis.Redis, name: str) -> list[int]:
    """The ids of the server's connections named ``name``."""
    return [int(c["id"]) for c in r.client_list() if c.get("name") == name]


def job_ids(r: redis.Redis, prefix: str) -> list[str]:
    return [fields[b"job_id"].decode() for _, fields in r.xrange(Keys(prefix).jobs)]


def test_threads_sharing_a_client_each_add_their_jobs(redis_url: str, r: redis.Redis, prefix: str) -> None:
    client = redis.Redis.from_url(redis_url, client_name=f"{prefix}threads")
    returned: list[str] = []

    def produce() -> None:
        returned.extend(enqueue(client, "noop", {"n": i}, prefix=prefix) for i in range(100))

    threads = [threading.Thread(target=produce) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    entries = [entry_id.decode() for entry_id, _ in r.xrange(Keys(prefix).jobs)]
    assert set(returned) == set(entries) and len(set(entries)) == 400, "every reply was its own call's"
    assert len(named(r, f"{prefix}threads")) <= 5, "at most one connection a thread, and the parked one"
    client.close()


def reaped(pid: int) -> tuple[int] | None:
    """The exit code of the child ``pid`` once it has exited (a tuple, so that 0 is truthy), else None."""
    done, status = os.waitpid(pid, os.WNOHANG)
    return (os.waitstatus_to_exitcode(status),) if done else None


def test_a_forked_child_enqueues_on_a_connection_of_its_own(redis_url: str, r: redis.Redis, prefix: str) -> None:
    client = redis.Redis.from_url(redis_url)
    enqueue(client, "noop", {"job_id": "parent-before"}, prefix=prefix)  # parks the parent's connection
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        code = 1
        try:
            code = 0 if "-" in enqueue(client, "noop", {"job_id": "child"}, prefix=prefix) else 1
        finally:
            os._exit(code)
    try:
        status = wait_for(lambda: reaped(pid), timeout_s=30, what="the child to exit")
    except BaseException:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise
    assert status == (0,), "the child enqueued"
    enqueue(client, "noop", {"job_id": "parent-after"}, prefix=prefix)  # the parent's parked one still answers
    assert job_ids(r, prefix) == ["parent-before", "child", "parent-after"]
    client.close()


def test_a_connection_lost_mid_call_is_replaced_and_the_job_added_once(
    r: redis.Redis, prefix: str, redis_proxy: Proxy
) -> None:
    client = redis.Redis.from_url(redis_proxy.url, client_name=f"{prefix}lost")
    first = enqueue(client, "noop", {"job_id": "warm"}, prefix=prefix)  # parks a connection (and loads the script)
    redis_proxy.delay_s = 0.5
    result: list[str] = []
    call = threading.Thread(target=lambda: result.append(enqueue(client, "noop", {"job_id": "lost"}, prefix=prefix)))
    call.start()
    wait_for(lambda: r.exists(Keys(prefix).enqueued("lost")), timeout_s=10, what="the write to reach Redis")
    redis_proxy.delay_s = 0.0
    assert redis_proxy.reset() >= 1  # its reply is still on the way: the call reads a reset connection
    call.join(timeout=30)
    assert not call.is_alive() and first != result[0]
    assert job_ids(r, prefix) == ["warm", "lost"], "the retry through the client added nothing more"
    assert [f for _, f in r.xrange(Keys(prefix).jobs)][1][b"job_id"] == b"lost"
    assert "-" in enqueue(client, "noop", {"n": 1}, prefix=prefix), "the parked connection connects again"
    client.close()


def test_close_disconnects_the_parked_connection_and_a_later_enqueue_connects_again(
    redis_url: str, r: redis.Redis, prefix: str
) -> None:
    name = f"{prefix}close"
    client = redis.Redis.from_url(redis_url, client_name=name)
    enqueue(client, "noop", {}, prefix=prefix)
    assert len(named(r, name)) == 1
    client.close()
    wait_for(lambda: not named(r, name), timeout_s=10, what="the parked connection to close")
    assert "-" in enqueue(client, "noop", {}, prefix=prefix)
    client.close()
    wait_for(lambda: not named(r, name), timeout_s=10, what="the connection to close again")
    assert r.xlen(Keys(prefix).jobs) == 2


def test_small_blocking_and_cached_pools_park_nothing(redis_url: str, prefix: str) -> None:
    assert parked.parks(redis.Redis.from_url(redis_url).connection_pool)
    assert not parked.parks(redis.ConnectionPool.from_url(redis_url, max_connections=parked.PARK_FROM - 1))
    assert not parked.parks(redis.BlockingConnectionPool.from_url(redis_url))
    single = redis.Redis.from_url(redis_url, max_connections=1)
    enqueue(single, "noop", {}, prefix=prefix)
    assert single.ping(), "the pool's one connection went back to it"
    single.close()


def test_a_dropped_client_takes_its_parked_connection_with_it(redis_url: str, r: redis.Redis, prefix: str) -> None:
    name = f"{prefix}dropped"
    client = redis.Redis.from_url(redis_url, client_name=name)
    enqueue(client, "noop", {}, prefix=prefix)
    pool = weakref.ref(client.connection_pool)
    del client
    gc.collect()
    assert pool() is None, "the parked connection does not keep its pool alive"
    wait_for(lambda: not named(r, name), timeout_s=10, what="the dropped client's socket to close")


def test_async_tasks_of_one_loop_share_no_connection_and_aclose_closes_it(
    redis_url: str, r: redis.Redis, prefix: str
) -> None:
    name = f"{prefix}async"

    async def main() -> tuple[list[str], list[str]]:
        client = aioredis.Redis.from_url(redis_url, client_name=name)
        together = await asyncio.gather(*(enqueue_async(client, "noop", {"n": i}, prefix=prefix) for i in range(50)))
        one_by_one = [await enqueue_async(client, "noop", {"n": i}, prefix=prefix) for i in range(50)]
        await client.aclose()
        return list(together), one_by_one

    together, one_by_one = asyncio.run(main())
    entries = [entry_id.decode() for entry_id, _ in r.xrange(Keys(prefix).jobs)]
    assert set(together + one_by_one) == set(entries) and len(set(entries)) == 100, "every reply its own call's"
    wait_for(lambda: not named(r, name), timeout_s=10, what="aclose to close the parked connection")


def test_an_async_connection_lost_while_parked_is_replaced(r: redis.Redis, prefix: str, redis_proxy: Proxy) -> None:
    async def main() -> tuple[str, str]:
        client = aioredis.Redis.from_url(redis_proxy.url)
        first = await enqueue_async(client, "noop", {"n": 1}, prefix=prefix)  # parks a connection
        assert redis_proxy.reset() >= 1
        second = await enqueue_async(client, "noop", {"n": 2}, prefix=prefix)
        await client.aclose()
        return first, second

    first, second = asyncio.run(main())
    assert [entry_id.decode() for entry_id, _ in r.xrange(Keys(prefix).jobs)] == [first, second]


def test_a_large_async_job_is_written_whole(redis_url: str, r: redis.Redis, prefix: str) -> None:
    body = "é" * 400_000  # 800 KB: more than a loopback socket may take at once

    async def main() -> list[str]:
        client = aioredis.Redis.from_url(redis_url)
        ids = [await enqueue_async(client, "noop", {"body": body, "n": i}, prefix=prefix) for i in range(3)]
        await client.aclose()
        return ids

    ids = asyncio.run(main())
    stored = r.xrange(Keys(prefix).jobs)
    assert [entry_id.decode() for entry_id, _ in stored] == ids
    assert all(fields[b"body"] == body.encode() for _, fields in stored)
