"""arq beside this worker: ``max_jobs`` 8, ``poll_delay`` from ARQ_POLL_DELAY (unset: arq's default).

Results are not kept (``keep_result=0``): this worker keeps none either.
Enqueue: arq has no bulk call; ``enqueue_job`` calls run 1,000 at a time with asyncio.gather.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from arq import create_pool
from arq.connections import RedisSettings
from arq.worker import Worker
from probe import PROBE, peer_main

SETTINGS = RedisSettings.from_dsn(os.environ["REDIS_URL"])


async def noop(ctx: dict[str, Any]) -> None:
    PROBE.done()


async def sleep10(ctx: dict[str, Any]) -> None:
    await asyncio.sleep(0.01)
    PROBE.done()


def enqueue(kind: str, count: int) -> None:
    async def main() -> None:
        pool = await create_pool(SETTINGS)
        for low in range(0, count, 1000):
            await asyncio.gather(*(pool.enqueue_job(kind) for _ in range(low, min(count, low + 1000))))
        await pool.aclose()

    asyncio.run(main())


def work(kind: str) -> None:
    options: dict[str, Any] = {}
    if os.environ.get("ARQ_POLL_DELAY"):
        options["poll_delay"] = float(os.environ["ARQ_POLL_DELAY"])

    async def main() -> None:
        worker = Worker(
            functions=[noop, sleep10],
            redis_settings=SETTINGS,
            max_jobs=8,
            keep_result=0,
            handle_signals=False,
            **options,
        )
        await worker.main()

    asyncio.run(main())


if __name__ == "__main__":
    peer_main(enqueue, work)
