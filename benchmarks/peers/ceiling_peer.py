"""The ceiling: a hand-written batched consumer of the same ``jobs`` stream, with nothing but the loop.

redis.asyncio with hiredis on uvloop (this worker's own stack, so it runs in
the project's environment): XREADGROUP COUNT 100 into a buffer, 8 jobs in
flight from it, and the acknowledgements gathered meanwhile flushed as one
XACK in the same pipeline as the next read. No parsing beyond the kind, no
retries, no observers, no claim refresh: what Python and redis-py can do on
this machine, which ``make bench`` sets this worker against.

Enqueue: pipelined XADD of this worker's fields (kind, job_id, attempts), 1,000 a round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections import deque
from collections.abc import Awaitable, Callable

import redis
import redis.asyncio as aioredis
from probe import PROBE, peer_main

STREAM, GROUP, CONSUMER = "jobs", "workers", "ceiling"
COUNT, IN_FLIGHT, BLOCK_MS = 100, 8, 1000


async def noop() -> None:
    PROBE.done()


async def sleep10() -> None:
    await asyncio.sleep(0.01)
    PROBE.done()


HANDLERS: dict[bytes, Callable[[], Awaitable[None]]] = {b"noop": noop, b"sleep10": sleep10}


def enqueue(kind: str, count: int) -> None:
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    for low in range(0, count, 1000):
        pipe = client.pipeline(transaction=False)
        for _ in range(low, min(count, low + 1000)):
            pipe.xadd(STREAM, {"kind": kind, "job_id": uuid.uuid4().hex, "attempts": "0"})
        pipe.execute()


async def consume() -> None:
    """Read 100 at a time while 8 run; the probe ends the process at the N-th job."""
    client = aioredis.Redis.from_url(os.environ["REDIS_URL"])
    with contextlib.suppress(redis.ResponseError):  # BUSYGROUP: made by an earlier run
        await client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    buffer: deque[tuple[bytes, dict[bytes, bytes]]] = deque()
    acks: list[bytes] = []
    freed = asyncio.Event()
    inflight = 0

    async def run(entry_id: bytes, fields: dict[bytes, bytes]) -> None:
        nonlocal inflight
        await HANDLERS[fields[b"kind"]]()
        acks.append(entry_id)
        inflight -= 1
        freed.set()

    tasks: set[asyncio.Task[None]] = set()
    while True:
        if not buffer:
            pipe = client.pipeline(transaction=False)
            if acks:
                pipe.xack(STREAM, GROUP, *acks)
                acks = []
            pipe.xreadgroup(GROUP, CONSUMER, {STREAM: ">"}, count=COUNT, block=BLOCK_MS)
            reply = (await pipe.execute())[-1]
            for _stream, entries in reply or ():
                buffer.extend(entries)
        while buffer and inflight < IN_FLIGHT:
            inflight += 1
            task = asyncio.create_task(run(*buffer.popleft()))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if buffer:
            freed.clear()
            await freed.wait()


def work(kind: str) -> None:
    import uvloop

    uvloop.run(consume())


if __name__ == "__main__":
    peer_main(enqueue, work)
