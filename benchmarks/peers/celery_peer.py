"""Celery beside this worker: Redis broker, the threads pool with 8 threads, no result backend.

The worker runs in this process (``app.Worker``) without mingle, gossip or heartbeat.
Enqueue: Celery has no bulk send; one ``apply_async`` per job through one producer.
"""

from __future__ import annotations

import os
import time

from celery import Celery
from probe import PROBE, peer_main

APP = Celery("celery_peer", broker=os.environ["REDIS_URL"])
APP.conf.task_ignore_result = True
APP.conf.worker_hijack_root_logger = False


@APP.task(name="noop")
def noop() -> None:
    PROBE.done()


@APP.task(name="sleep10")
def sleep10() -> None:
    time.sleep(0.01)
    PROBE.done()


TASKS = {"noop": noop, "sleep10": sleep10}


def enqueue(kind: str, count: int) -> None:
    task = TASKS[kind]
    with APP.producer_or_acquire() as producer:
        for _ in range(count):
            task.apply_async(producer=producer)


def work(kind: str) -> None:
    APP.Worker(
        pool="threads",
        concurrency=8,
        loglevel="WARNING",
        without_mingle=True,
        without_gossip=True,
        without_heartbeat=True,
        quiet=True,
    ).start()


if __name__ == "__main__":
    peer_main(enqueue, work)
