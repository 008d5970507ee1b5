"""Job kinds: a handler declared with its retry policy, registered by import.

An application's module declares its kinds next to their handlers::

    @job_kind("send_email", retry=RetryPolicy(retries=5, base_s=1.0, cap_s=60.0))
    async def send_email(job: Job) -> None: ...

and the worker imports the modules named in ``WORKER_KINDS`` (or ``--kinds``)
before it starts, so it knows exactly the kinds it imported and no others.
Plain (non-async) handlers run in a thread so they never block the loop.
"""

from __future__ import annotations

import importlib
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

if TYPE_CHECKING:
    from worker.app import WorkerApp

from worker.errors import KindAlreadyRegistered, SettingsError, UnknownKind
from worker.job import Job
from worker.retry import RetryPolicy
from worker.store.queues import DECLARED_QUEUES, DEFAULT_QUEUE, checked_queue
from worker.store.versions import DECLARED, VERSION_FIELD

Handler = Callable[[Job], Awaitable[Any] | Any]
Upcaster = Callable[[dict[str, str]], Mapping[str, Any]]
"""Turns a payload's fields (every field, as strings) of one version into the next version's."""


@dataclass(frozen=True)
class KindSpec:
    """A registered kind: its handler, retry policy, optional timeout and optional rate limit."""

    name: str
    handler: Handler
    retry: RetryPolicy
    timeout_s: float | None
    is_async: bool
    rate_limit: float | None = None
    """Jobs a second across all workers, unless ``opslib.throttle`` sets another (None: no limit)."""
    isolation: str = "thread"
    """Where a plain handler runs: ``thread`` (the worker's job threads) or ``process`` (a child per attempt,
    killed when it will not stop: :mod:`worker.loop.isolation`)."""
    version: int = 1
    """The payload version the handler reads (the field ``v``; :mod:`worker.store.versions`)."""
    upcast: Mapping[int, Upcaster] = field(default_factory=dict)
    """For each older version n, the function turning a version-n payload into version n + 1."""
    queue: str = DEFAULT_QUEUE
    """The named queue its jobs go to unless the caller names another (:mod:`worker.store.queues`)."""

    def upcasted(self, job: Job, version: int) -> Job:
        """``job`` (a payload of ``version``, below :attr:`version`) as the handler reads it: through each
        upcaster from ``version`` up, its ``v`` set to this version. An upcaster's exception is the job's
        failure, retried or dead-lettered as the kind's policy says."""
        fields = dict(job.fields)
        for step in range(version, self.version):
            fields = {str(name): str(value) for name, value in self.upcast[step](dict(fields)).items()}
        fields[VERSION_FIELD] = str(self.version)
        return Job(job.kind, job.job_id, job.attempts, job.entry_id, fields)


Lifespan = Callable[["WorkerApp"], AbstractAsyncContextManager[None]]


@dataclass
class Registry:
    """The kinds, schedules and lifespans that imported modules declared.

    A lifespan is an async context manager the worker enters before it starts
    consuming and leaves after it stopped: an application opens its database
    pool there and adds its chores. ``needs_database`` tells the worker to
    start the embedded PostgreSQL when ``DATABASE_URL`` is unset.
    """

    kinds: dict[str, KindSpec] = field(default_factory=dict)
    schedules: dict[str, Any] = field(default_factory=dict)
    lifespans: list[Lifespan] = field(default_factory=list)
    needs_database: bool = False

    def add(self, spec: KindSpec) -> None:
        existing = self.kinds.get(spec.name)
        if existing is not None and existing.handler is not spec.handler:
            raise KindAlreadyRegistered(
                f"kind {spec.name!r} is declared twice: by {_where(existing.handler)} and by {_where(spec.handler)}"
            )
        self.kinds[spec.name] = spec

    def get(self, name: str) -> KindSpec:
        try:
            return self.kinds[name]
        except KeyError:
            known = ", ".join(sorted(self.kinds)) or "none"
            raise UnknownKind(f"unknown kind {name!r}; known kinds: {known}") from None


class KindOptions(TypedDict, total=False):
    """The rest of :func:`job_kind`'s keywords (each absent for its default)."""

    version: int
    upcast: Mapping[int, Upcaster] | None
    queue: str


REGISTRY = Registry()
"""The process-wide registry that ``@job_kind`` fills (like a Celery app's tasks)."""


def job_kind(
    name: str,
    *,
    retry: RetryPolicy | None = None,
    timeout_s: float | None = None,
    rate_limit: float | None = None,
    isolation: str = "thread",
    registry: Registry | None = None,
    **options: Unpack[KindOptions],
) -> Callable[[Handler], Handler]:
    """Declare ``name`` as a job kind handled by the decorated function; ``rate_limit``: at most that many
    of its jobs start a second across all workers (``opslib.throttle`` overrides it until lifted);
    ``isolation="process"``: each attempt of a plain handler in a child process (docs/worker.md).

    ``version``: the payload version the handler reads; ``upcast``: for each older version n, a function
    from a version-n payload to version n + 1 (chains apply: 1 -> 2 -> 3), so a job enqueued before a
    deploy runs after it (docs/worker.md, "Changing a kind's payload safely").

    ``queue``: the named queue its jobs go to when ``enqueue`` names none, in a process that registers the
    kind (docs/worker.md, "Queues and weights")."""
    if not name or not isinstance(name, str):
        raise ValueError(f"a kind name must be a non-empty string, got {name!r}")
    if timeout_s is not None and timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0 or None, got {timeout_s!r}")
    if rate_limit is not None and (isinstance(rate_limit, bool) or not rate_limit > 0):
        raise ValueError(f"rate_limit must be jobs a second > 0 (e.g. 10) or None, got {rate_limit!r}")
    if isolation not in ("thread", "process"):
        raise ValueError(f"isolation must be 'thread' or 'process', got {isolation!r}")
    version = options.get("version", 1)
    upcasters = _checked_upcasters(name, version, options.get("upcast") or {})
    queue = checked_queue(options.get("queue", DEFAULT_QUEUE), f"kind {name!r}: the queue")

    def register(handler: Handler) -> Handler:
        if isolation == "process" and inspect.iscoroutinefunction(handler):
            raise ValueError(f"kind {name!r}: isolation='process' is for plain (def) handlers; make it a def")
        if registry is None:  # the process-wide registry: this process's enqueue stamps its version
            DECLARED[name] = version
            DECLARED_QUEUES[name] = queue
        (registry or REGISTRY).add(
            KindSpec(
                name=name,
                handler=handler,
                retry=retry or RetryPolicy(),
                timeout_s=timeout_s,
                is_async=inspect.iscoroutinefunction(handler),
                rate_limit=None if rate_limit is None else float(rate_limit),
                isolation=isolation,
                version=version,
                upcast=upcasters,
                queue=queue,
            )
        )
        return handler

    return register


def lifespan(
    *, needs_database: bool = False, registry: Registry | None = None
) -> Callable[[Callable[[WorkerApp], AsyncIterator[None]]], Lifespan]:
    """Declare an async generator ``fn(app)`` that sets up (before its yield) and
    tears down (after it) what an application's handlers need."""

    def register(fn: Callable[[WorkerApp], AsyncIterator[None]]) -> Lifespan:
        managed = asynccontextmanager(fn)
        target = registry or REGISTRY
        if managed not in target.lifespans:
            target.lifespans.append(managed)
        target.needs_database = target.needs_database or needs_database
        return managed

    return register


def import_kind_modules(modules: Iterable[str]) -> None:
    """Import each module so that its ``@job_kind`` and ``schedule`` calls register."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise SettingsError(
                f"WORKER_KINDS: cannot import {module!r} ({exc}); name importable modules, "
                "comma-separated, e.g. myapp.kinds"
            ) from exc


def declaration(registry: Registry, last_success: Mapping[str, float] | None = None, queues: Sequence[str] = ()) -> str:
    """What a worker publishes beside its heartbeat (``kinds:<worker>``): each kind it runs with its retry
    policy, timeout and rate limit (and, from ``last_success``, when it last succeeded here: epoch
    seconds), the schedules it carries, and the named queues it serves (``queues``: the other workers hand
    an entry back only for a worker that serves its queue), as JSON (read by ``opslib.kinds()``)."""
    succeeded = last_success or {}
    kinds = {
        spec.name: {
            "retries": spec.retry.retries,
            "base_s": spec.retry.base_s,
            "cap_s": spec.retry.cap_s,
            "give_up_on": [error.__name__ for error in spec.retry.give_up_on],
            "timeout_s": spec.timeout_s,
            "rate_limit": spec.rate_limit,
            "version": spec.version,
            "queue": spec.queue,
            "last_succeeded_at": succeeded.get(spec.name),
        }
        for spec in registry.kinds.values()
    }
    schedules = {
        name: {"kind": sched.kind, "cron": sched.cron, "every_s": sched.every_s}
        for name, sched in registry.schedules.items()
    }
    return json.dumps({"kinds": kinds, "schedules": schedules, "queues": list(queues)}, sort_keys=True)


def _checked_upcasters(name: str, version: int, upcast: Mapping[int, Upcaster]) -> dict[int, Upcaster]:
    """``upcast`` checked against ``version``: one callable for each of 1 .. version - 1, nothing else."""
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"kind {name!r}: version must be an integer >= 1 (e.g. 2), got {version!r}")
    wanted = set(range(1, version))
    if set(upcast) != wanted or not all(callable(fn) for fn in upcast.values()):
        need = ", ".join(f"{n}: fn({n} -> {n + 1})" for n in sorted(wanted)) or "none"
        raise ValueError(
            f"kind {name!r} at version {version}: upcast must map each older version to a function, "
            f"got versions {sorted(upcast)}; give {{{need}}}"
        )
    return dict(upcast)


def _where(handler: Handler) -> str:
    return f"{getattr(handler, '__module__', '?')}.{getattr(handler, '__qualname__', '?')}"
