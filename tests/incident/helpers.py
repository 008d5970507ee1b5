"""What the incident-desk tests share: the jobs, the runs the kinds record, and the stop of a worker."""

from __future__ import annotations

import json
import signal
import subprocess
from typing import Any

import worker
from tests.helpers import wait_for
from worker.store.keys import Keys

KINDS = "tests.incident.kinds_incident"


def enqueue_jobs(client: Any, prefix: str, kind: str, count: int, partitions: int = 1) -> None:
    jobs = [worker.NewJob(kind, {"job_id": f"{kind}-{n}"}) for n in range(count)]
    for start in range(0, count, 500):
        worker.enqueue_many(client, jobs[start : start + 500], prefix=prefix, partitions=partitions)


def runs(client: Any, prefix: str, kind: str) -> dict[str, int]:
    """Job id -> how many times it ran."""
    return {k.decode(): int(v) for k, v in client.hgetall(f"{prefix}test:runs:{kind}").items()}


def starts(client: Any, prefix: str, kind: str) -> list[float]:
    """When each job of ``kind`` started (epoch seconds), sorted."""
    return sorted(float(v) for v in client.hvals(f"{prefix}test:started:{kind}"))


def parked_job_ids(client: Any, prefix: str, kind: str) -> list[str]:
    """The job ids of ``kind`` waiting in ``parked`` (one partition), in their order; a member is the kind,
    its place and its fields as a JSON array of names and values, NUL apart."""
    ids = []
    for member in client.zrange(Keys(prefix).parked, 0, -1):
        parked_kind, _place, fields = member.split(b"\0", 2)
        if parked_kind.decode() == kind:
            flat = json.loads(fields)
            ids.append(dict(zip(flat[::2], flat[1::2], strict=True))["job_id"])
    return ids


def stop(proc: subprocess.Popen[str]) -> None:
    """SIGTERM a worker and wait for it to exit (it lets running jobs finish)."""
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)


def wait_runs(client: Any, prefix: str, kind: str, at_least: int, timeout_s: float = 60) -> None:
    wait_for(lambda: len(runs(client, prefix, kind)) >= at_least, timeout_s, f"{at_least} jobs of {kind} to have run")
