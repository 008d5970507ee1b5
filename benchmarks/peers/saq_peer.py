"""saq beside this worker: ``concurrency`` 8, its defaults otherwise.

Enqueue: saq has no bulk call; ``enqueue`` calls run 1,000 at a time with asyncio.gather.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from probe import PROBE, peer_main
from saq import Queue, Worker


async def noop(ctx: dict[str, Any]) -> None:
    PROBE.done()


async def sleep10(ctx: dict[str, Any]) -> None:
    await asyncio.sleep(0.01)
    PROBE.done()


def enqueue(kind: str, count: int) -> None:
    async def main() -> None:
        queue = Queue.from_url(os.environ["REDIS_URL"])
        await queue.connect()
        for low in range(0, count, 1000):
            await asyncio.gather(*(queue.enqueue(kind) for _ in range(low, min(count, low + 1000))))
        await queue.disconnect()

    asyncio.run(main())


def work(kind: str) -> None:
    async def main() -> None:
        queue = Queue.from_url(os.environ["REDIS_URL"])
        await queue.connect()
        await Worker(queue, functions=[noop, sleep10], concurrency=8).start()

    asyncio.run(main())


if __name__ == "__main__":
    peer_main(enqueue, work)
