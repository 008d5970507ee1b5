"""What ``isolation="process"`` costs an attempt: N plain no-op jobs run by one worker with one slot, in its
threads and then in a child process each; prints the time a job for both and the difference.

    .venv/bin/python -m benchmarks.isolation_cost [N]

On ``REDIS_URL`` (its keys go under a prefix of their own, deleted after), else on a valkey-server of its own
(embedded, stopped after).
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import redis

from worker import Job, job_kind, run_worker
from worker.embedded.servers import start_redis
from worker.kinds import Registry
from worker.settings import Settings
from worker.store.enqueue import NewJob, enqueue_many

REGISTRY = Registry()


@job_kind("in_thread", registry=REGISTRY)
def in_thread(job: Job) -> None:
    """Nothing: what is measured is the way in and out."""


@job_kind("in_process", isolation="process", registry=REGISTRY)
def in_process(job: Job) -> None:
    """Nothing, in a child process of its own."""


def seconds_a_job(settings: Settings, client: redis.Redis, kind: str, count: int) -> float:
    """Run ``count`` jobs of ``kind`` to the end (burst) and return the wall time a job."""
    enqueue_many(client, [NewJob(kind, {"n": str(n)}) for n in range(count)], prefix=settings.prefix)
    started = time.perf_counter()
    run_worker(settings, registry=REGISTRY, burst=True, stop=threading.Event())
    return (time.perf_counter() - started) / count


def main(count: int) -> None:
    prefix = f"bench-isolation-{uuid.uuid4().hex[:8]}:"
    server = (
        None if os.environ.get("REDIS_URL") else start_redis(Path(tempfile.mkdtemp(prefix="isolation-")) / "valkey")
    )
    url = {"REDIS_URL": server.url} if server is not None else {}
    env = {**os.environ, **url, "QUEUE_PREFIX": prefix, "WORKER_CONCURRENCY": "1", "ARCHIVE_URL": "off"}
    settings = Settings.from_env(env)
    client = redis.Redis.from_url(settings.redis_url)
    try:
        thread_s = seconds_a_job(settings, client, "in_thread", count)
        process_s = seconds_a_job(settings, client, "in_process", count)
    finally:
        for key in client.scan_iter(match=f"{prefix}*"):
            client.delete(key)
        client.close()
        if server is not None:
            server.stop()
    cost_ms = (process_s - thread_s) * 1000
    print(f"{count} plain no-op jobs, 1 slot: thread {thread_s * 1000:.2f} ms a job, process {process_s * 1000:.2f} ms")
    print(f"isolation='process' costs {cost_ms:.2f} ms an attempt")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
