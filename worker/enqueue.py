"""Adding jobs: to ``jobs`` now, or to ``delayed`` for later.

``enqueue`` takes a plain ``redis.Redis``; ``enqueue_async`` a
``redis.asyncio.Redis``. Both set ``attempts`` to 0 and return the new entry
id or, for a delayed job, the ``delayed`` member. ``enqueue_many`` and
``enqueue_many_async`` add a batch of :class:`NewJob` in one pipelined round
trip (the outbox relay publishes through them).

A job's identity is its ``job_id`` field, else its ``outbox_id``
(:func:`worker.wire.job_id_of`): fields that carry either keep it (a caller's
own ``job_id``; the outbox relay's ``outbox_id``, which stays on the wire as
such), and a job named by neither gets a minted ``job_id`` (uuid4 hex).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from worker.keys import Keys
from worker.wire import encode_member, job_id_of, text

FieldValue = str | int | float


def job_fields(kind: str, fields: Mapping[str, FieldValue] | None) -> dict[str, str]:
    """The flat string map of a new job, attempts 0, with a ``job_id`` minted unless the fields name the job."""
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
    if not job_id_of(out):
        out["job_id"] = uuid.uuid4().hex
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
class NewJob:
    """One job for :func:`enqueue_many`: the arguments :func:`enqueue` takes for one job."""

    kind: str
    fields: Mapping[str, FieldValue] | None = None
    delay_s: float | None = None
    run_at: datetime | float | None = None


@dataclass(frozen=True)
class _Plan:
    """Where a new job goes: ``jobs`` now (``due`` None), or ``delayed`` as ``member`` at ``due``."""

    job: dict[str, str]
    due: float | None
    member: str

    @classmethod
    def of(cls, new: NewJob) -> _Plan:
        job = job_fields(new.kind, new.fields)
        due = run_at_epoch(new.delay_s, new.run_at)
        return cls(job, due, encode_member(job) if due is not None else "")

    def send(self, target: Any, keys: Keys) -> Any:
        """Issue the one write on a client (its reply) or a pipeline (queued)."""
        if self.due is None:
            return target.xadd(keys.jobs, self.job)
        return target.zadd(keys.delayed, {self.member: self.due})

    def result(self, reply: Any) -> str:
        """What enqueue returns for the write's reply: the new entry id, or the ``delayed`` member."""
        return text(reply) if self.due is None else self.member


def _queue_keys(prefix: str | None) -> Keys:
    """The keys of the queue ``prefix`` names; None: ``QUEUE_PREFIX`` from the environment."""
    return Keys(os.environ.get("QUEUE_PREFIX", "") if prefix is None else prefix)


def enqueue(
    redis: Any,
    kind: str,
    fields: Mapping[str, FieldValue] | None = None,
    *,
    delay_s: float | None = None,
    run_at: datetime | float | None = None,
    prefix: str | None = None,
) -> str:
    """Add a job; return its entry id, or its ``delayed`` member when it runs later.

    ``prefix`` defaults to ``QUEUE_PREFIX`` from the environment.
    """
    plan = _Plan.of(NewJob(kind, fields, delay_s, run_at))
    return plan.result(plan.send(redis, _queue_keys(prefix)))


async def enqueue_async(
    redis: Any,
    kind: str,
    fields: Mapping[str, FieldValue] | None = None,
    *,
    delay_s: float | None = None,
    run_at: datetime | float | None = None,
    prefix: str | None = None,
) -> str:
    """:func:`enqueue` for a ``redis.asyncio`` client."""
    plan = _Plan.of(NewJob(kind, fields, delay_s, run_at))
    return plan.result(await plan.send(redis, _queue_keys(prefix)))


def enqueue_many(redis: Any, jobs: Iterable[NewJob], *, prefix: str | None = None) -> list[str]:
    """Add several jobs in one pipelined round trip; return what :func:`enqueue` returns for each, in order.

    Every job is checked before anything is sent, so a bad one adds none.
    The pipeline is not a transaction: a connection lost midway may leave
    some jobs added (callers that retry, like the outbox relay, publish
    those again; handlers are idempotent).
    """
    plans = [_Plan.of(new) for new in jobs]
    if not plans:
        return []
    keys = _queue_keys(prefix)
    pipe = redis.pipeline(transaction=False)
    for plan in plans:
        plan.send(pipe, keys)
    return [plan.result(reply) for plan, reply in zip(plans, pipe.execute(), strict=True)]


async def enqueue_many_async(redis: Any, jobs: Iterable[NewJob], *, prefix: str | None = None) -> list[str]:
    """:func:`enqueue_many` for a ``redis.asyncio`` client."""
    plans = [_Plan.of(new) for new in jobs]
    if not plans:
        return []
    keys = _queue_keys(prefix)
    pipe = redis.pipeline(transaction=False)
    for plan in plans:
        plan.send(pipe, keys)
    return [plan.result(reply) for plan, reply in zip(plans, await pipe.execute(), strict=True)]
