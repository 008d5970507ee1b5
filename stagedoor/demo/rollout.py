"""The demo's rolling deploy: ``ask_feedback`` goes from payload version 1 to 2 with old and new workers side by side.

:func:`run_rollout` starts one worker of each deploy (``WORKER_KINDS`` =
:mod:`stagedoor.demo.feedback_v1` and :mod:`stagedoor.demo.feedback_v2`)
under a queue prefix of its own, ``<prefix>rollout:`` (its keys are deleted
first, so each run starts clean), waits until both publish their kinds,
enqueues jobs of both versions interleaved, waits until every one has run
(bounded), stops both workers and returns what Redis says of it
(:class:`Rollout`). The old worker hands each version-2 entry back, counted as
no delivery, and the new one runs it; a version-1 entry runs on either, on the
new one through the upcaster. ``make run`` logs :meth:`Rollout.summary`.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from stagedoor.demo.feedback import KIND, runs_key
from stagedoor.demo.session import DemoNight, stop_worker
from worker.archive.table import migrate_url as migrate_archive
from worker.store.enqueue import NewJob, enqueue_many
from worker.store.keys import Keys
from worker.store.wire import decode_member

DEPLOYS = {"old": "stagedoor.demo.feedback_v1", "new": "stagedoor.demo.feedback_v2"}
JOBS_PER_VERSION = 30
TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Rollout:
    """What the rollout's queue holds once every job has run (counts of jobs)."""

    enqueued: dict[str, int]
    """Jobs enqueued by payload version (``"1"``, ``"2"``)."""
    ran: dict[tuple[str, str], int]
    """Jobs run by (deploy, the ``v`` its handler saw): ``("new", "2")`` counts upcast version-1 jobs too."""
    handed_back: int
    """Hand-backs in all (a job handed back twice counts 2)."""
    v2_by_old: int
    failed: int
    """Jobs waiting in ``delayed`` for a retry (attempts above 0) or dead-lettered."""
    dead: int

    def summary(self) -> str:
        old, new = self.ran.get(("old", "1"), 0), self.ran.get(("new", "2"), 0)
        return (
            f"Rolling deploy of {KIND} v1 -> v2: {self.enqueued.get('1', 0)} v1 and {self.enqueued.get('2', 0)} v2 "
            f"jobs; ran by the old worker {old} (v1 only; v2 {self.v2_by_old}), by the new worker {new} "
            f"(v1 upcast and v2); {self.handed_back} hand-backs; failed {self.failed}, dead {self.dead}."
        )


def rollout_prefix(prefix: str) -> str:
    """The rollout's own queue prefix, beside the night's."""
    return f"{prefix}rollout:"


def run_rollout(demo: DemoNight, client: redis.Redis, *, per_version: int = JOBS_PER_VERSION) -> Rollout:
    """Run the rolling deploy of ``ask_feedback`` on ``client``'s server; raise RuntimeError past TIMEOUT_S."""
    prefix = rollout_prefix(demo.prefix)
    migrate_archive(demo.database_url)  # its workers archive to the night's database (idempotent)
    for key in client.scan_iter(match=f"{prefix}*", count=1000):
        client.delete(key)
    deadline = time.monotonic() + TIMEOUT_S
    workers = [
        demo.start_worker(
            QUEUE_PREFIX=prefix,
            WORKER_KINDS=module,
            WORKER_NAME=f"rollout-{deploy}",
            BLOCK_MS="100",
            WORKER_QUEUES="default",
        )
        for deploy, module in DEPLOYS.items()
    ]
    try:
        keys = Keys(prefix)
        up = [keys.declared(f"rollout-{deploy}") for deploy in DEPLOYS]
        _wait(lambda: client.exists(*up) == len(up), workers, deadline, "both workers up")
        jobs = [
            NewJob(KIND, {"job_id": f"feedback-v{v}-{i}", field: f"buyer{i}@example.com"}, version=v)
            for i in range(per_version)
            for v, field in ((1, "email"), (2, "to"))
        ]
        enqueue_many(client, jobs, prefix=prefix)
        total = len(jobs)
        _wait(lambda: client.hlen(runs_key(prefix)) + _failed(client, keys)[0] >= total, workers, deadline, "every job")
    finally:
        for worker in workers:
            stop_worker(worker, grace_s=10.0)
    return _read(client, keys, prefix, per_version)


def _wait(done: Callable[[], bool], workers: list[subprocess.Popen[bytes]], deadline: float, what: str) -> None:
    """Poll ``done`` until it holds; raise RuntimeError once a worker has exited or past ``deadline``."""
    while not done():
        if any(worker.poll() is not None for worker in workers):
            raise RuntimeError(f"a worker of the rolling deploy exited while waiting for {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the rolling deploy did not finish within {TIMEOUT_S:.0f} s: waiting for {what}")
        time.sleep(0.05)


def _failed(client: redis.Redis, keys: Keys) -> tuple[int, int]:
    """(failed, dead): dead entries plus delayed ones awaiting a retry; dead entries."""
    dead = int(client.xlen(keys.dead))
    members: list[bytes] = client.zrange(keys.delayed, 0, -1)  # type: ignore[assignment]
    retrying = len([m for m in members if int(decode_member(m).get("attempts", "0")) > 0])
    return dead + retrying, dead


def _read(client: redis.Redis, keys: Keys, prefix: str, per_version: int) -> Rollout:
    runs = [json.loads(raw) for raw in client.hvals(runs_key(prefix))]
    ran: dict[tuple[str, str], int] = {}
    for run in runs:
        ran[(run["deploy"], run["v"])] = ran.get((run["deploy"], run["v"]), 0) + 1
    failed, dead = _failed(client, keys)
    return Rollout(
        enqueued={"1": per_version, "2": per_version},
        ran=ran,
        handed_back=sum(int(run["handed_back"]) for run in runs),
        v2_by_old=ran.get(("old", "2"), 0),
        failed=failed,
        dead=dead,
    )
