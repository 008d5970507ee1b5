"""Fair shares across tenants: jobs enqueued with ``fair_key=`` take turns onto ``jobs``, round-robin by key.

A job with a fair key does not go onto ``jobs``: ``fair_enqueue.lua`` puts it in
the partition's ``fair:queue`` (a sorted set) scored by its *turn*, one past the
later of the queue's clock (the turn of the job moved onto ``jobs`` last) and its
key's last turn (start-time fair queueing, ``lua/includes/fair_turns.lua``). Each
worker's fair feeder (:mod:`worker.loop.fair_feeder`) keeps ``jobs`` holding about
its slot count of undelivered entries, moving the jobs of the earliest turns
(``fair_dispatch.lua``), so a key with one job waits behind about one turn of
each other key with work, not behind another key's backlog. While fair jobs wait,
entries without a fair key that reach ``jobs`` beyond that depth are spilled into
the fair queue under the key "" (their ``fair_key`` field set to ""): jobs without
a key share one key. An entry with the field (a fair job's retry, delayed run or
replay, promoted onto ``jobs`` as any) is never spilled: it keeps its place.

A queue that never uses fair keys pays nothing: a plain enqueue is the XADD it
was, the read loop sends nothing more, and each worker's feeder asks Redis once a
second whether fair jobs wait (:data:`worker.loop.fair_feeder.IDLE_CHECK_S`).
"""

from __future__ import annotations

import hashlib
from typing import Any

import redis.asyncio.client

from worker.store.keys import GROUP, Keys
from worker.store.scripts import CLUSTER_PIPELINES, source
from worker.store.wire import encode_member

#: The job field that holds its fair key (kept on the wire: retries, dead letters and replays keep it).
FAIR_FIELD = "fair_key"
#: The longest fair key accepted (it is a field of every job and of ``fair:last``).
MAX_FAIR_KEY_CHARS = 200

ENQUEUE = source("fair_enqueue")
ENQUEUE_SHA = hashlib.sha1(ENQUEUE.encode()).hexdigest()


def checked_fair_key(value: object) -> str | None:
    """``value`` when it is a fair key (None: none); ValueError, one line, otherwise."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_FAIR_KEY_CHARS:
        raise ValueError(
            f"fair_key must be a non-empty string of at most {MAX_FAIR_KEY_CHARS} characters "
            f"(e.g. the tenant's id, 'org-17'), got {value!r:.60}"
        )
    return value


def _enqueue_args(keys: Keys, job: dict[str, str]) -> list[Any]:
    return [*keys.fair_scripts, GROUP, job[FAIR_FIELD], encode_member(job)]


def send_fair(target: Any, keys: Keys, job: dict[str, str]) -> Any:
    """Enqueue ``job`` (which holds its :data:`FAIR_FIELD`) on a client (its reply, awaitable on an asyncio
    client) or a pipeline (queued). A cluster pipeline needs the script loaded first (:func:`load_fair`)."""
    args = _enqueue_args(keys, job)
    if isinstance(target, CLUSTER_PIPELINES):
        return target.execute_command("EVALSHA", ENQUEUE_SHA, 4, *args)
    script = target.register_script(ENQUEUE)
    if isinstance(target, redis.asyncio.client.Pipeline):  # the asyncio Script would be a coroutine, never queued
        target.scripts.add(script)  # loaded by the pipeline before it runs
        return target.evalsha(ENQUEUE_SHA, 4, *args)
    return script(keys=args[:4], args=args[4:])


def fair_evalsha(keys: Keys, job: dict[str, str]) -> tuple[str, ...]:
    """The enqueue as the parts of an EVALSHA, for a call packed by :mod:`worker.store.packed` (a client's
    script call hashes the source and goes through redis-py's command layer: 230 against 120 µs of CPU an
    enqueue beside a guarded one, packed; on NOSCRIPT the caller falls back to :func:`send_fair`)."""
    return ("EVALSHA", ENQUEUE_SHA, "4", *map(str, _enqueue_args(keys, job)))


def fair_command(keys: Keys, job: dict[str, str]) -> tuple[Any, ...]:
    """The same enqueue as a raw EVAL, for :mod:`worker.store.durable` (``WAIT_REPLICAS``)."""
    return ("EVAL", ENQUEUE, 4, *_enqueue_args(keys, job))


def load_fair(client: Any) -> Any:
    """Load the enqueue script on every primary of a cluster (before a cluster pipeline sends EVALSHA)."""
    return client.script_load(ENQUEUE)
