"""Adding jobs: to ``jobs`` now, or to ``delayed`` for later.

``enqueue`` takes a plain ``redis.Redis`` or a ``redis.cluster.RedisCluster``
(what :func:`worker.connect` returns); ``enqueue_async`` their asyncio
twins. Both set ``attempts`` to 0 and return the new entry id or, for a
delayed job, the ``delayed`` member. ``enqueue_many`` and
``enqueue_many_async`` add a batch of :class:`NewJob` in one pipelined round
trip (the outbox relay publishes through them).

A job's identity is its ``job_id`` field, else its ``outbox_id``
(:func:`worker.store.wire.job_id_of`): fields that carry either keep it (a caller's
own ``job_id``; the outbox relay's ``outbox_id``, which stays on the wire as
such), and a job named by neither gets a minted ``job_id`` (uuid4 hex). The
job goes to the partition of its identity (:func:`worker.store.keys.partition_of`);
with ``WAIT_REPLICAS`` > 0 a call returns once that many replicas have the
job (:mod:`worker.store.durable`). A job over ``MAX_JOB_BYTES`` (the UTF-8
bytes of every field's name and value) is refused with a ValueError of one line.
Inside an active span, each call writes the W3C trace context (``traceparent``,
``tracestate``) into its jobs, under a ``send`` span when a tracer records
(:func:`worker.store.trace_context.sending`); fields that carry a
``traceparent`` of their own (the outbox relay's) keep it.

When Redis refuses the write (out of memory, read-only, misconfigured
persistence, no permission), each raises :class:`worker.errors.QueueRefused`,
one line naming the reason (:mod:`worker.store.refusals`).
"""

from __future__ import annotations

import functools
import inspect
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict, Unpack

from worker.settings import Settings
from worker.settings_framework import declared
from worker.store import packed, ties, unique
from worker.store.connection import is_cluster
from worker.store.durable import WAIT_TIMEOUT_MS, write_and_wait, write_and_wait_async
from worker.store.fair import FAIR_FIELD, checked_fair_key, fair_command, fair_evalsha, load_fair, send_fair
from worker.store.keys import Keys, partition_of, queue_partitions
from worker.store.packed import packs_for, xadd_command, xadd_head
from worker.store.queues import DEFAULT_QUEUE, queue_for
from worker.store.refusals import refused_as_queue_refused
from worker.store.scripts import CLUSTER_PIPELINES
from worker.store.trace_context import TRACEPARENT, sending
from worker.store.unique import guarded, once_call, ref_of, route_of
from worker.store.versions import stamped
from worker.store.wire import encode_member, job_bytes, job_id_of, text

NOT_ENQUEUED = "the job was not enqueued; enqueue it again once Redis accepts writes"
SOME_NOT_ENQUEUED = "some or all of the jobs were not enqueued; enqueue them again once Redis accepts writes"

FieldValue = str | int | float


def job_fields(
    kind: str, fields: Mapping[str, FieldValue] | None, context: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The flat string map of a new job, attempts 0, with a ``job_id`` minted unless the fields name the job,
    and the trace ``context`` unless the fields carry a ``traceparent``."""
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
        out["job_id"] = minted_id()
    out["attempts"] = "0"
    if context and TRACEPARENT not in out:
        out.update(context)
    return out


def minted_id() -> str:
    """A new job id: ``uuid.uuid4().hex``'s format (version 4, RFC 4122 variant) from 16 random bytes, set
    with two masks instead of through ``uuid.UUID`` (whose checks make it 1.9 µs against 1.0 µs a call)."""
    number = int.from_bytes(os.urandom(16))
    return "%032x" % (number & ~(0xF000 << 64) & ~(0xC000 << 48) | (4 << 76) | (0x8000 << 48))


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
    version: int | None = None
    """The payload's version (field ``v``); None: the version this process registers for the kind, if any."""
    fair_key: str | None = None
    """The tenant whose turn the job waits for (field ``fair_key``, :mod:`worker.store.fair`); None: none."""
    unique_key: str | None = None
    """At most one job of this kind and key until it reaches a terminal state (:mod:`worker.store.unique`)."""
    unique_for: float | None = None
    """With ``unique_key``: the key is also held this many seconds from the enqueue, whatever the job became."""
    job_id: str | None = None
    """The producer's own job id: the same id again within 24 h adds nothing (:mod:`worker.store.unique`)."""
    queue: str | None = None
    """The named queue; None: the call's ``queue``, else the kind's declared queue, else ``default``."""


class Where(TypedDict, total=False):
    """The queue a call writes to, each None or absent for its setting: ``QUEUE_PREFIX``,
    ``QUEUE_PARTITIONS``, ``WAIT_REPLICAS``; ``queue``: the named queue (None: the kind's declared
    queue where this process registers the kind, else ``default``; :func:`worker.store.queues.queue_for`);
    and the job's ``fair_key`` and guards (:class:`NewJob`): ``unique_key``, ``unique_for``, ``job_id``
    (None or absent: none)."""

    prefix: str | None
    partitions: int | None
    wait_replicas: int | None
    queue: str | None
    fair_key: str | None
    unique_key: str | None
    unique_for: float | None
    job_id: str | None


def _new_job(kind: str, fields: Any, when: tuple[Any, Any], version: int | None, where: Where) -> NewJob:
    """The :class:`NewJob` of an :func:`enqueue` call (``when``: its ``delay_s`` and ``run_at``)."""
    return NewJob(
        kind,
        fields,
        when[0],
        when[1],
        version,
        fair_key=where.get("fair_key"),
        unique_key=where.get("unique_key"),
        unique_for=where.get("unique_for"),
        job_id=where.get("job_id"),
    )


@dataclass(frozen=True)
class _Plan:
    """Where a new job goes: ``jobs`` now (``due`` None), or ``delayed`` as ``member`` at ``due``; a job
    for now with a fair key (``fair``) waits in ``fair:queue`` for its turn (:mod:`worker.store.fair`)."""

    job: dict[str, str]
    due: float | None
    member: str
    fair: bool = False
    guard: tuple[bool, float | None] | None = None
    """Set for a job with a producer's id or a unique key: (mark its id, unique_for); it goes through
    ``enqueue_once`` (:mod:`worker.store.unique`)."""

    @classmethod
    def of(cls, new: NewJob, max_job_bytes: int, context: Mapping[str, str] | None = None) -> _Plan:
        fields, guard = guarded(new.fields, new.job_id, new.unique_key, new.unique_for)
        job = stamped(job_fields(new.kind, fields, context), new.version)
        fair_key = checked_fair_key(new.fair_key)
        if fair_key is not None:
            job[FAIR_FIELD] = fair_key
        size = job_bytes(job)
        if size > max_job_bytes:
            raise ValueError(
                f"the {new.kind!r} job is {size} bytes, over MAX_JOB_BYTES={max_job_bytes}; keep large payloads "
                "elsewhere (a database row, object storage) and put their reference in the job"
            )
        due = run_at_epoch(new.delay_s, new.run_at)
        return cls(job, due, encode_member(job) if due is not None else "", due is None and fair_key is not None, guard)

    def send(self, target: Any, keys: Keys, redis: Any = None) -> Any:
        """Issue the one write on a client (its reply) or a pipeline (queued; ``redis``: the pipeline's
        client, on which a guarded job's script is registered)."""
        if self.guard is not None:
            names, args = self.once(keys)
            once = unique.script(target if redis is None else redis)
            if isinstance(target, CLUSTER_PIPELINES):
                return target.execute_command("EVALSHA", once.sha, len(names), *names, *args)
            return once(keys=names, args=args, client=target)
        if self.fair:
            return send_fair(target, keys, self.job)
        if self.due is None:
            return target.xadd(keys.jobs, self.job)
        return ties.send_later(target, keys.delayed, self.due, self.member, redis)

    def once(self, keys: Keys) -> tuple[list[str], list[Any]]:
        """The KEYS and ARGV of ``enqueue_once`` for this guarded job (``guard`` is set)."""
        assert self.guard is not None
        return once_call(keys, self.job, self.due, self.member, self.guard, self.job[FAIR_FIELD] if self.fair else None)

    def command(self, keys: Keys) -> tuple[Any, ...]:
        """The same write as a raw command, for :mod:`worker.store.durable`."""
        if self.guard is not None:
            names, args = self.once(keys)
            return ("EVAL", unique.script_source(), len(names), *names, *args)
        if self.fair:
            return fair_command(keys, self.job)
        if self.due is None:
            return ("XADD", keys.jobs, "*", *(x for pair in self.job.items() for x in pair))
        return ties.later_command(keys.delayed, self.due, self.member)

    def key(self, keys: Keys) -> str:
        return keys.jobs if self.due is None else keys.delayed

    def result(self, reply: Any) -> str:
        """What enqueue returns for the write's reply: the new entry id, the ``delayed`` member (a guarded
        job's duplicate: the first job's, :func:`worker.store.unique.ref_of`), or for a fair job (whose entry
        id comes with its turn) its job id."""
        if self.guard is not None:
            return ref_of(reply)
        if self.fair:
            return job_id_of(self.job)
        return text(reply) if self.due is None else self.member


@dataclass(frozen=True)
class _Queue:
    """Where new jobs go: the queue's partitions, how many replicas each write waits for, the largest job;
    and what is worked out once per queue: its name for spans (``messaging.destination.name``, its ``jobs``
    key without a partition) and each partition's XADD head, packed (:func:`worker.store.packed.xadd_head`)."""

    parts: list[Keys]
    wait_replicas: int
    max_job_bytes: int
    destination: str
    heads: tuple[bytes, ...]

    @classmethod
    def where(cls, where: Where, kind: str) -> _Queue:
        """The queue a call's :class:`Where` keywords name for a job of ``kind``."""
        name = queue_for(kind, where.get("queue"))
        return cls.of(where.get("prefix"), where.get("partitions"), where.get("wait_replicas"), name)

    @classmethod
    def of(cls, prefix: str | None, partitions: int | None, wait_replicas: int | None, name: str) -> _Queue:
        """The named queue ``name`` with the arguments; None: ``QUEUE_PREFIX``, ``QUEUE_PARTITIONS``,
        ``WAIT_REPLICAS``.

        The environment's four values are looked up on every call (:func:`_queue_env`: one dict lookup
        each), but parsed and checked only when they differ from a previous call's (:func:`_queue`): reading
        the settings was three quarters of an enqueue's CPU before the driver ran."""
        return _queue(prefix, partitions, wait_replicas, name, _queue_env())

    @classmethod
    def build(cls, parts: list[Keys], wait_replicas: int, max_job_bytes: int) -> _Queue:
        heads = tuple(xadd_head(keys.jobs) for keys in parts)
        return cls(parts, wait_replicas, max_job_bytes, Keys(parts[0].prefix, queue=parts[0].queue).jobs, heads)

    def announce(self, redis: Any) -> Any:
        """A named queue's first job from this process also adds the queue to ``queues`` (opslib, health and
        the archiver list the queues from it); None when there is nothing to add (``default``, or done)."""
        keys = self.parts[0]
        if keys.queue == DEFAULT_QUEUE or (keys.prefix, keys.queue) in _ANNOUNCED:
            return None
        _ANNOUNCED.add((keys.prefix, keys.queue))
        return redis.sadd(keys.queues, keys.queue)

    def plan(self, new: NewJob, context: Mapping[str, str] | None = None) -> _Plan:
        """Where ``new`` goes, with the trace ``context``; ValueError (one line) for a bad job or one over
        ``MAX_JOB_BYTES``."""
        return _Plan.of(new, self.max_job_bytes, context)

    def part_of(self, plan: _Plan) -> int:
        """The index of the partition the job belongs to."""
        return partition_of(route_of(plan.job), len(self.parts))

    def keys_of(self, plan: _Plan) -> Keys:
        """The keys of the partition the job belongs to."""
        return self.parts[self.part_of(plan)]

    def send(self, redis: Any, plan: _Plan) -> Any:
        """One job's write and its reply: on a plain client a job for now as an XADD packed here, a guarded
        or a fair job as its script's EVALSHA packed here (:mod:`worker.store.packed`); anything else
        through the client's own command."""
        part = self.part_of(plan)
        if packs_for(redis):
            if plan.guard is not None or plan.fair:
                return packed.send_or(
                    redis, self.evalsha(redis, plan, part), lambda: plan.send(redis, self.parts[part])
                )
            if plan.due is None and not plan.fair:
                return packed.send(redis, xadd_command(self.heads[part], plan.job), self.parts[part].jobs, plan.job)
        return plan.send(redis, self.parts[part])

    async def send_async(self, redis: Any, plan: _Plan) -> Any:
        """:meth:`send` on a ``redis.asyncio`` client."""
        part = self.part_of(plan)
        if packs_for(redis):
            if plan.guard is not None or plan.fair:
                command = self.evalsha(redis, plan, part)
                return await packed.send_or_async(redis, command, lambda: plan.send(redis, self.parts[part]))
            if plan.due is None and not plan.fair:
                command = xadd_command(self.heads[part], plan.job)
                return await packed.send_or_async(redis, command, lambda: redis.xadd(self.parts[part].jobs, plan.job))
        return await plan.send(redis, self.parts[part])

    def evalsha(self, redis: Any, plan: _Plan, part: int) -> bytes:
        """A guarded job's ``enqueue_once`` call, or a fair job's enqueue, as a packed EVALSHA."""
        if plan.guard is None:
            return packed.command(*fair_evalsha(self.parts[part], plan.job))
        names, args = plan.once(self.parts[part])
        sha = unique.script(redis).sha
        return packed.command("EVALSHA", sha, str(len(names)), *names, *map(str, args))


#: The settings a queue is read from, and the variables that hold them.
_QUEUE_FIELDS = ("prefix", "partitions", "wait_replicas", "max_job_bytes")
_QUEUE_ENV = tuple(declared(Settings)[field].env for field in _QUEUE_FIELDS)
_QUEUE_ENV_BYTES = tuple(os.fsencode(name) for name in _QUEUE_ENV)


def _queue_env() -> tuple[str | bytes | None, ...]:
    """The raw values of :data:`_QUEUE_ENV` now, as ``os.environ`` holds them (None: unset).

    A value changes when the process changes it through ``os.environ`` (set, delete,
    ``monkeypatch.setenv``): the next call sees it, as ``os.environ.get`` would; like ``os.environ``
    itself, it never sees a C library's ``setenv``. On POSIX the lookup is one in ``os.environ``'s own
    dict of bytes: ``os.environ.get`` encodes the name, raises and catches KeyError for an unset one and
    decodes the value, 10 µs for the four under load against 0.3 µs."""
    data = getattr(os.environ, "_data", None) if os.name == "posix" else None
    if not isinstance(data, dict):
        return tuple(os.environ.get(name) for name in _QUEUE_ENV)
    return tuple(map(data.get, _QUEUE_ENV_BYTES))


#: The (prefix, queue) pairs this process has added to ``queues`` (:meth:`_Queue.announce`).
_ANNOUNCED: set[tuple[str, str]] = set()


@functools.lru_cache(maxsize=64)
def _queue(
    prefix: str | None,
    partitions: int | None,
    wait_replicas: int | None,
    name: str,
    raw: tuple[str | bytes | None, ...],
) -> _Queue:
    """The queue of the arguments and of the environment's values ``raw`` (of :data:`_QUEUE_ENV`), parsed
    once per distinct set; a bad value raises :class:`~worker.errors.SettingsError` and is not kept."""
    env = {name: os.fsdecode(value) for name, value in zip(_QUEUE_ENV, raw, strict=True) if value is not None}
    prefix = Settings.one("prefix", env) if prefix is None else prefix
    partitions = Settings.one("partitions", env) if partitions is None else partitions
    wait_replicas = Settings.one("wait_replicas", env) if wait_replicas is None else wait_replicas
    return _Queue.build(queue_partitions(prefix, partitions, name), wait_replicas, Settings.one("max_job_bytes", env))


def enqueue(
    redis: Any,
    kind: str,
    fields: Mapping[str, FieldValue] | None = None,
    *,
    delay_s: float | None = None,
    run_at: datetime | float | None = None,
    version: int | None = None,
    **where: Unpack[Where],
) -> str:
    """Add a job; return its entry id, or its ``delayed`` member when it runs later.

    ``version`` is written as the field ``v`` (None: the version this process registers for ``kind``;
    a kind at version 1 writes none). With ``fair_key`` (:class:`Where`) the job waits for its key's turn,
    round-robin with the other keys' jobs (:mod:`worker.store.fair`), and the call returns its job id.
    ``prefix``, ``partitions`` and ``wait_replicas`` (:class:`Where`)
    default to ``QUEUE_PREFIX``, ``QUEUE_PARTITIONS`` and ``WAIT_REPLICAS`` from the environment; ``queue``
    to the kind's declared queue where this process registers the kind, else ``default``. The job goes
    to the partition of its ``job_id`` (of its kind and ``unique_key`` when it has one), and with
    ``wait_replicas`` > 0 the call returns once that many replicas have it (:mod:`worker.store.durable`).

    ``unique_key`` (with ``unique_for``) and ``job_id`` guard the enqueue (:mod:`worker.store.unique`): a
    duplicate adds nothing and returns the first job's entry id or member.

    A lost reply: ``ConnectionError`` or ``TimeoutError`` raised after the command was sent does not mean
    the job is absent: Redis may have added it and the reply been lost on the way back. Give the job an id
    of your own (``job_id=``, or a ``job_id`` / ``outbox_id`` field) and call again with the same id: within
    24 h a repeat adds nothing and returns the first call's result. Without an id of your own, calling
    again may add the job twice (its handler must then be idempotent, as every handler must be anyway).
    """
    queue = _Queue.where(where, kind)
    with sending(queue.destination, 1) as context, refused_as_queue_refused(NOT_ENQUEUED):
        plan = queue.plan(_new_job(kind, fields, (delay_s, run_at), version, where), context)
        queue.announce(redis)
        if queue.wait_replicas:
            return _durably(redis, queue, plan)
        return plan.result(queue.send(redis, plan))


async def enqueue_async(
    redis: Any,
    kind: str,
    fields: Mapping[str, FieldValue] | None = None,
    *,
    delay_s: float | None = None,
    run_at: datetime | float | None = None,
    version: int | None = None,
    **where: Unpack[Where],
) -> str:
    """:func:`enqueue` for a ``redis.asyncio`` client."""
    queue = _Queue.where(where, kind)
    with sending(queue.destination, 1) as context, refused_as_queue_refused(NOT_ENQUEUED):
        plan = queue.plan(_new_job(kind, fields, (delay_s, run_at), version, where), context)
        announced = queue.announce(redis)
        if announced is not None:
            await announced
        if queue.wait_replicas:
            keys = queue.keys_of(plan)
            command = plan.command(keys)
            return plan.result(await write_and_wait_async(redis, plan.key(keys), command, queue.wait_replicas))
        return plan.result(await queue.send_async(redis, plan))


def enqueue_many(
    redis: Any,
    jobs: Iterable[NewJob],
    *,
    prefix: str | None = None,
    partitions: int | None = None,
    wait_replicas: int | None = None,
    queue: str | None = None,
) -> list[str]:
    """Add several jobs in one pipelined round trip; return what :func:`enqueue` returns for each, in order.

    Each job goes to its own ``NewJob.queue``, else ``queue``, else its kind's declared queue, else
    ``default``. Every job is checked before anything is sent, so a bad one adds none.
    The pipeline is not a transaction: a connection lost midway may leave
    some jobs added. Jobs with an id of the producer's (the outbox relay's
    ``outbox_id``) may be sent again: those already added are not added twice
    (:func:`enqueue`); a duplicate inside one batch adds one job. With
    ``wait_replicas`` on a cluster, each job is written and waited for on its own.
    """
    news = list(jobs)
    if not news:
        return []
    batch = _Batch.of(news, _Queue.of(prefix, partitions, wait_replicas, DEFAULT_QUEUE), queue)
    with sending(batch.first.destination, len(news)) as context, refused_as_queue_refused(SOME_NOT_ENQUEUED):
        plans = batch.plan(context)  # every job checked before anything is sent
        if batch.first.wait_replicas and is_cluster(redis):
            return [_durably(redis, queue_of, plan) for queue_of, plan in plans]
        if is_cluster(redis) and any(plan.fair for _q, plan in plans):
            load_fair(redis)
        if is_cluster(redis) and any(plan.guard for _q, plan in plans):
            redis.script_load(unique.script_source())  # a cluster pipeline sends EVALSHA as it is
        if is_cluster(redis) and any(plan.due is not None and not plan.guard for _q, plan in plans):
            redis.script_load(ties.script_source())
        pipe = redis.pipeline(transaction=False)
        for queue_of, plan in plans:
            plan.send(pipe, queue_of.keys_of(plan), redis)
        batch.announce(pipe)
        if batch.first.wait_replicas:
            pipe.execute_command("WAIT", batch.first.wait_replicas, WAIT_TIMEOUT_MS)
        replies = pipe.execute()
    return [plan.result(reply) for (_q, plan), reply in zip(plans, replies, strict=False)]


def _durably(redis: Any, queue: _Queue, plan: _Plan) -> str:
    """One job's write and its WAIT, on one connection to its partition's primary."""
    keys = queue.keys_of(plan)
    return plan.result(write_and_wait(redis, plan.key(keys), plan.command(keys), queue.wait_replicas))


@dataclass(frozen=True)
class _Batch:
    """The jobs of one :func:`enqueue_many` call, each with its queue (``first``: the call's own, whose
    prefix, partitions and replicas every job shares)."""

    first: _Queue
    jobs: list[tuple[_Queue, NewJob]]

    @classmethod
    def of(cls, news: list[NewJob], first: _Queue, queue: str | None) -> _Batch:
        keys = first.parts[0]
        count, replicas = len(first.parts), first.wait_replicas
        jobs = [(_Queue.of(keys.prefix, count, replicas, queue_for(new.kind, new.queue or queue)), new) for new in news]
        return cls(first, jobs)

    def plan(self, context: Mapping[str, str] | None) -> list[tuple[_Queue, _Plan]]:
        return [(queue, queue.plan(new, context)) for queue, new in self.jobs]

    def announce(self, pipe: Any) -> int:
        """Queue each named queue's first announcement on ``pipe`` (after the jobs); how many."""
        return sum(queue.announce(pipe) is not None for queue in {id(q): q for q, _new in self.jobs}.values())


async def enqueue_many_async(
    redis: Any,
    jobs: Iterable[NewJob],
    *,
    prefix: str | None = None,
    partitions: int | None = None,
    wait_replicas: int | None = None,
    queue: str | None = None,
) -> list[str]:
    """:func:`enqueue_many` for a ``redis.asyncio`` client."""
    news = list(jobs)
    if not news:
        return []
    batch = _Batch.of(news, _Queue.of(prefix, partitions, wait_replicas, DEFAULT_QUEUE), queue)
    with sending(batch.first.destination, len(news)) as context, refused_as_queue_refused(SOME_NOT_ENQUEUED):
        plans = batch.plan(context)  # every job checked before anything is sent
        if batch.first.wait_replicas and is_cluster(redis):
            out = []
            for queue_of, plan in plans:
                keys = queue_of.keys_of(plan)
                command = plan.command(keys)
                reply = await write_and_wait_async(redis, plan.key(keys), command, queue_of.wait_replicas)
                out.append(plan.result(reply))
            return out
        if is_cluster(redis) and any(plan.fair for _q, plan in plans):
            await load_fair(redis)
        if is_cluster(redis) and any(plan.guard for _q, plan in plans):
            await redis.script_load(unique.script_source())  # a cluster pipeline sends EVALSHA as it is
        if is_cluster(redis) and any(plan.due is not None and not plan.guard for _q, plan in plans):
            await redis.script_load(ties.script_source())
        pipe = redis.pipeline(transaction=False)
        for queue_of, plan in plans:
            queued = plan.send(pipe, queue_of.keys_of(plan), redis)
            if inspect.iscoroutine(queued):  # a script's call on an asyncio pipeline queues when awaited
                await queued
        batch.announce(pipe)
        if batch.first.wait_replicas:
            pipe.execute_command("WAIT", batch.first.wait_replicas, WAIT_TIMEOUT_MS)
        replies = await pipe.execute()
    return [plan.result(reply) for (_q, plan), reply in zip(plans, replies, strict=False)]
