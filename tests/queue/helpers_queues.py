"""Shared by the named-queue tests on one server and on the cluster: fill queues, run a worker until it
has made enough starts, and count each queue's share of them (:mod:`tests.queue.kinds_queues`)."""

from __future__ import annotations

import signal
from collections import Counter
from typing import Any

from tests.helpers import Workers, wait_for
from worker.store.enqueue import NewJob, enqueue_many

KINDS = "tests.queue.kinds_queues"
WEIGHTS = {"critical": 6, "default": 3, "bulk": 1}
SERVED = "critical:6,default:3,bulk:1"


def fill(client: Any, prefix: str, per_queue: dict[str, int], partitions: int = 1) -> None:
    """Enqueue ``per_queue[q]`` jobs of ``q_start`` to each queue ``q``, in batches of 500."""
    for queue, count in per_queue.items():
        for start in range(0, count, 500):
            jobs = [NewJob("q_start", {"q": queue}) for _ in range(min(500, count - start))]
            enqueue_many(client, jobs, prefix=prefix, partitions=partitions, queue=queue)


def starts_of(client: Any, prefix: str, workers: Workers, at_least: int, **env: str) -> list[str]:
    """Start one worker, wait until it has made ``at_least`` starts, stop it (SIGTERM, waited for), and
    return the queues of its starts in order."""
    proc = workers.start(KINDS, **env)
    key = f"{prefix}test:starts"
    try:
        wait_for(lambda: client.llen(key) >= at_least, timeout_s=60, what=f"{at_least} starts")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert proc.returncode == 0, workers.log(proc)
    return [queue.decode() for queue in client.lrange(key, 0, -1)]


def shares(starts: list[str]) -> dict[str, float]:
    """Each queue's share of ``starts``, in percent."""
    counts = Counter(starts)
    return {queue: 100 * counts[queue] / len(starts) for queue in WEIGHTS}


def longest_gap(starts: list[str], queue: str) -> int:
    """The most starts in a row of other queues between two of ``queue``'s (or before its first)."""
    gap = longest = 0
    for started in starts:
        gap = 0 if started == queue else gap + 1
        longest = max(longest, gap)
    return longest


def lowest_window_share(starts: list[str], queue: str, size: int = 1000) -> float:
    """``queue``'s lowest share of starts, in percent, over the windows of ``size`` starts (every 100th
    start opening one): a queue starved for a while shows a low one however fair the whole run is."""
    windows = range(0, max(1, len(starts) - size + 1), 100)
    return min(100 * starts[n : n + size].count(queue) / size for n in windows)
