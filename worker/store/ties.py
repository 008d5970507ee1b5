"""Jobs for later due at the same moment, kept in enqueue order, whichever process enqueued them: the
``enqueue_later`` script (``lua/enqueue_later.lua``) gives a job the next free ``delayed`` score at its due
time (``lua/includes/later_score.lua``, which ``enqueue_once`` shares). docs/worker.md, "Unique jobs and
idempotent enqueue"."""

from __future__ import annotations

from typing import Any

from redis.commands.core import Script

from worker.store.lua_source import registered, source
from worker.store.scripts import CLUSTER_PIPELINES


def script(redis: Any) -> Script:
    """The ``enqueue_later`` script registered on ``redis`` (once per client)."""
    return registered(redis, "enqueue_later")


def script_source() -> str:
    """The Lua source of ``enqueue_later`` (its include in place)."""
    return source("enqueue_later")


def send_later(target: Any, delayed: str, due: float, member: str, redis: Any = None) -> Any:
    """Add a job for later on a client (its reply) or a pipeline (queued; ``redis``: the pipeline's client,
    on which the script is registered): one EVALSHA, as the ZADD it replaces."""
    later = script(target if redis is None else redis)
    if isinstance(target, CLUSTER_PIPELINES):
        return target.execute_command("EVALSHA", later.sha, 1, delayed, repr(due), member)
    return later(keys=[delayed], args=[repr(due), member], client=target)


def later_command(delayed: str, due: float, member: str) -> tuple[Any, ...]:
    """The same add as a raw command, for :mod:`worker.store.durable`."""
    return ("EVAL", script_source(), 1, delayed, repr(due), member)
