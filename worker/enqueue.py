"""Adding jobs: to ``jobs`` now, or to ``delayed`` for later.

``enqueue`` takes a plain ``redis.Redis`` or a ``redis.cluster.RedisCluster``
(what :func:`worker.connect` returns); ``enqueue_async`` their asyncio
twins. Both mint ``job_id`` (uuid4 hex) when the fields carry none and set
``attempts`` to 0, put the job in the partition of its ``job_id``
(:func:`worker.keys.partition_of`), and return the new entry id or, for a
delayed job, the ``delayed`` member.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from worker.durable import write_and_wait, write_and_wait_async
from worker.keys import Keys, partition_of, queue_partitions
from worker.settings import non_negative_int, positive_int
from worker.wire import encode_member, text

FieldValue = str | int | float


def job_fields(kind: str, fields: Mapping[str, FieldValue] | None) -> dict[str, str]:
    """The flat string map of a new job, with ``job_id`` minted and attempts 0."""
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"kind must be a non-empty string, got {kind!r}")
    out: dict[str, str] = {}
    for name, value in (fields or {}).items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"field names must be non-empty strings, got {name!r}")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ValueError(
                f"field {name!r} must be a string or a number, got {type(value).__name__}; "
                "encode structured values (e.g. as JSON) yourself"
            )
        out[name] = str(value)
    out["kind"] = kind
    out.setdefault("job_id", uuid.uuid4().hex)
    out["attempts"] = "0"
    return out


def run_at_epoch(delay_s: float | None, run_at: datetime | float | None) -> float | None:
    """When a delayed job is due (epoch seconds), or None to run now."""
    if delay_s is not None and run_at is not None:
        raise ValueError("give delay_s or run_at, not both")
    if delay_s is not None:
        if delay_s < 0:
            raise ValueError(f"delay_s must be >= 0, got {delay_s}")
        return time.time() + delay_s
    if isinstance(run_at, datetime):
        if run_at.tzinfo is None:
            raise ValueError("run_at must be timezone-aware (e.g. datetime.now(UTC))")
        return run_at.timestamp()
    return None if run_at is None else float(run_at)


@dataclass(frozen=True)
class _Plan:
    """Where a new job goes: ``jobs`` now, or ``delayed`` with ``member`` at ``due``."""

    keys: Keys
    job: dict[str, str]
    due: float | None
    member: str
    wait_replicas: int

    @property
    def key(self) -> str:
        return self.keys.jobs if self.due is None else self.keys.delayed

    @property
    def command(self) -> tuple[Any, ...]:
        """The write as a raw command (for :mod:`worker.durable`)."""
        if self.due is None:
            return ("XADD", self.keys.jobs, "*", *(x for pair in self.job.items() for x in pair))
        return ("ZADD", self.keys.delayed, repr(self.due), self.member)

    def result(self, reply: Any) -> str:
        return text(reply) if self.due is None else self.member


def _plan(
    kind: str,
    fields: Mapping[str, FieldValue] | None,
    delay_s: float | None,
    run_at: datetime | float | None,
    prefix: str | None,
    partitions: int | None,
    wait_replicas: int | None,
) -> _Plan:
    prefix = os.environ.get("QUEUE_PREFIX", "") if prefix is None else prefix
    if partitions is None:
        partitions = positive_int("QUEUE_PARTITIONS", os.environ.get("QUEUE_PARTITIONS", "1"))
    if wait_replicas is None:
        wait_replicas = non_negative_int("WAIT_REPLICAS", os.environ.get("WAIT_REPLICAS", "0"))
    job = job_fields(kind, fields)
    keys = queue_partitions(prefix, partitions)[partition_of(job["job_id"], partitions)]
    due = run_at_epoch(delay_s, run_at)
    return _Plan(keys, job, due, encode_member(job) if due is not None else "", wait_replicas)


def enqueue(
    redis: Any,
    kind: str,
    fields: Mapping[str, FieldValue] | None = None,
    *,
    delay_s: float | None = None,
    run_at: datetime | float | None = None,
    prefix: str | None = None,
    partitions: int | None = None,
    wait_replicas: int | None = None,
) -> str:
    """Add a job; return its entry id, or its ``delayed`` member when it runs later.

    ``prefix``, ``partitions`` and ``wait_replicas`` default to ``QUEUE_PREFIX``,
    ``QUEUE_PARTITIONS`` and ``WAIT_REPLICAS`` from the environment; the job goes
    to the partition of its ``job_id``, and with ``wait_replicas`` > 0 the call
    returns once that many replicas have it (:mod:`worker.durable`).
    """
    plan = _plan(kind, fields, delay_s, run_at, prefix, partitions, wait_replicas)
    if plan.wait_replicas:
        return plan.result(write_and_wait(redis, plan.key, plan.command, plan.wait_replicas))
    if plan.due is None:
        return text(redis.xadd(plan.keys.jobs, plan.job))
    redis.zadd(plan.keys.delayed, {plan.member: plan.due})
    return plan.member


async def enqueue_async(
    redis: Any,
    kind: str,
    fields: Mapping[str, FieldValue] | None = None,
    *,
    delay_s: float | None = None,
    run_at: datetime | float | None = None,
    prefix: str | None = None,
    partitions: int | None = None,
    wait_replicas: int | None = None,
) -> str:
    """:func:`enqueue` for a ``redis.asyncio`` client."""
    plan = _plan(kind, fields, delay_s, run_at, prefix, partitions, wait_replicas)
    if plan.wait_replicas:
        return plan.result(await write_and_wait_async(redis, plan.key, plan.command, plan.wait_replicas))
    if plan.due is None:
        return text(await redis.xadd(plan.keys.jobs, plan.job))
    await redis.zadd(plan.keys.delayed, {plan.member: plan.due})
    return plan.member
