"""Dramatiq beside this worker: Redis broker, one process with 8 worker threads.

The worker runs in this process (``dramatiq.Worker``) rather than under the
``dramatiq`` command, which forks: one process, like the others.
Enqueue: Dramatiq has no bulk call; one ``send`` per job.
"""

from __future__ import annotations

import os
import time

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from probe import PROBE, peer_main

BROKER = RedisBroker(url=os.environ["REDIS_URL"])
dramatiq.set_broker(BROKER)


@dramatiq.actor(max_retries=0)
def noop() -> None:
    PROBE.done()


@dramatiq.actor(max_retries=0)
def sleep10() -> None:
    time.sleep(0.01)
    PROBE.done()


ACTORS = {"noop": noop, "sleep10": sleep10}


def enqueue(kind: str, count: int) -> None:
    actor = ACTORS[kind]
    for _ in range(count):
        actor.send()


def work(kind: str) -> None:
    worker = dramatiq.Worker(BROKER, worker_threads=8)
    worker.start()
    while True:
        time.sleep(1)


if __name__ == "__main__":
    peer_main(enqueue, work)
