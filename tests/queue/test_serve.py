"""A worker started from code, without argparse: what an application or a test does with ``worker.cli.serve``."""

from __future__ import annotations

import asyncio

import redis

from worker import Job, job_kind
from worker.cli.serve import serve
from worker.kinds import Registry
from worker.settings import Settings
from worker.store.enqueue import enqueue
from worker.store.keys import Keys


def test_serve_runs_a_registry_of_its_own_until_the_queue_drains(
    r: redis.Redis, keys: Keys, prefix: str, redis_url: str
) -> None:
    registry = Registry()
    seen: list[str] = []

    @job_kind("greet", registry=registry)
    async def greet(job: Job) -> None:
        seen.append(job.fields["name"])

    for name in ("ada", "grace"):
        enqueue(r, "greet", {"name": name}, prefix=prefix)
    settings = Settings.from_env({"REDIS_URL": redis_url, "QUEUE_PREFIX": prefix, "ARCHIVE_URL": "off"})
    asyncio.run(asyncio.wait_for(serve(settings, redis_url, "", registry=registry, burst=True), timeout=60))
    assert sorted(seen) == ["ada", "grace"]
    assert r.xlen(keys.dead) == 0
