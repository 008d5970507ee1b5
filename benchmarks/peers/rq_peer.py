"""RQ's SimpleWorker beside this worker (one job at a time, in the worker's own process).

Results are not kept (``result_ttl=0``): this worker keeps none either.
Enqueue: ``Queue.enqueue_many`` with ``Queue.prepare_data``, RQ's bulk call, 1,000 a call.
"""

from __future__ import annotations

import os
import time

from probe import PROBE, peer_main
from redis import Redis
from rq import Queue, SimpleWorker

CONNECTION = Redis.from_url(os.environ["REDIS_URL"])


def noop() -> None:
    PROBE.done()


def sleep10() -> None:
    time.sleep(0.01)
    PROBE.done()


def enqueue(kind: str, count: int) -> None:
    queue = Queue(connection=CONNECTION)
    for low in range(0, count, 1000):
        size = min(count, low + 1000) - low
        queue.enqueue_many([Queue.prepare_data(f"rq_peer.{kind}", result_ttl=0) for _ in range(size)])


def work(kind: str) -> None:
    SimpleWorker([Queue(connection=CONNECTION)], connection=CONNECTION).work(logging_level="WARNING")


if __name__ == "__main__":
    peer_main(enqueue, work)
