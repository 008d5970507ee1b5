"""Unique jobs and idempotent enqueue: the check and the add in one script (``lua/enqueue_once.lua``).

Two guards, each taken only when the producer asks for it, so that a job with neither stays on the
fast path (a packed XADD, or for later the EVALSHA of ``enqueue_later``, no key of its own):

- **Idempotent enqueue.** A job id of the producer's (``enqueue(..., job_id=X)``, a ``job_id`` field or
  the outbox relay's ``outbox_id``) leaves a mark ``enqueued:<job_id>`` for :data:`IDEMPOTENCY_WINDOW_S`
  (24 h) holding what the first call returned. A repeat within the window adds nothing and returns that
  (the first entry id or ``delayed`` member): a producer may retry a call whose reply was lost.
- **Unique key.** ``unique_key=K`` (or a ``unique_key`` field) holds the lock ``unique:<kind>:<K>`` from
  the enqueue until the job's terminal state (succeeded, dead, discarded, cancelled); the move that
  settles the job releases it in the same script (``ack_unique``, ``bury``, ``cancel_delayed``,
  ``cancel_entry``: ``lua/includes/release_unique.lua``). ``unique_for=S`` also holds it S seconds from the
  enqueue. A job with a key goes to the partition of its kind and key (:func:`route_of`), so the lock and
  the job share a hash tag on a cluster and every duplicate meets the same lock.

Retries, replays and run-now move the same job and never pass through here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from redis.commands.core import Script

from worker.store.keys import GROUP, Keys
from worker.store.lua_source import registered, source
from worker.store.wire import decode_member, encode_member, job_id_of, parked_fields

#: How long a producer's job id is remembered by enqueue: a repeat within it adds nothing.
IDEMPOTENCY_WINDOW_S = 86_400
#: The job field that carries its unique key (read by the worker to release the lock).
UNIQUE_KEY = "unique_key"


def route_of(job: Mapping[str, str]) -> str:
    """What picks a job's partition: its kind and unique key when it has one, else its identity."""
    key = job.get(UNIQUE_KEY)
    return f"{job['kind']}:{key}" if key else job_id_of(job)


def lock_of(keys: Keys, job: Mapping[str, str]) -> str | None:
    """The unique lock a job holds (its partition's ``unique:<kind>:<key>``), or None without a key."""
    key = job.get(UNIQUE_KEY)
    return keys.unique(job.get("kind", ""), key) if key else None


def guarded(
    fields: Mapping[str, Any] | None, job_id: str | None, unique_key: str | None, unique_for: float | None
) -> tuple[Mapping[str, Any] | None, tuple[bool, float | None] | None]:
    """A new job's fields with its ``job_id`` and ``unique_key`` options written in, and its guard for
    :func:`once_call` (None: no guard, the fast path); ValueError (one line) for a bad option."""
    if job_id is not None or unique_key is not None:
        fields = dict(fields or {})
        for name, value in (("job_id", job_id), (UNIQUE_KEY, unique_key)):
            if value is not None:
                if not isinstance(value, str) or not value:
                    raise ValueError(f"{name} must be a non-empty string, got {value!r}")
                fields[name] = value
    unique = bool(fields and fields.get(UNIQUE_KEY))
    hold = unique_for
    if hold is not None and (not unique or isinstance(hold, bool) or not isinstance(hold, int | float) or hold <= 0):
        raise ValueError(f"unique_for must be a number of seconds > 0 given with a unique_key, got {unique_for!r}")
    producer_id = bool(fields and (fields.get("job_id") or fields.get("outbox_id")))
    return fields, ((producer_id, unique_for) if producer_id or unique else None)


def held_lock(keys: Keys, member: str | bytes) -> list[str]:
    """``[lock, job_id]`` of the job a ``delayed``, ``throttled`` or ``parked`` member holds a unique key for,
    else ``[]`` (none, or a malformed member): what cancel_delayed releases."""
    raw = member.encode() if isinstance(member, str) else member
    try:
        fields = parked_fields(raw) if raw.count(b"\0") >= 2 else decode_member(raw)
    except ValueError:
        return []
    lock = lock_of(keys, fields)
    return [lock, job_id_of(fields)] if lock else []


def once_call(
    keys: Keys,
    job: Mapping[str, str],
    due: float | None,
    member: str,
    guard: tuple[bool, float | None],
    fair_key: str | None = None,
) -> tuple[list[str], list[Any]]:
    """The KEYS and ARGV of ``enqueue_once`` for one job; ``guard``: (mark the producer's job id, the
    unique_for in seconds or None); ``fair_key``: the key of a job for now that waits for its turn
    (:mod:`worker.store.fair`)."""
    marked, unique_for = guard
    lock = lock_of(keys, job)
    job_id = job_id_of(job)
    fair = due is None and fair_key is not None
    flags = ("m" if marked else "") + ("u" if lock else "") + ("f" if fair else "")
    names = [keys.jobs if due is None else keys.delayed]
    if marked:
        names.append(keys.enqueued(job_id))
    if lock:
        names.append(lock)
    hold = "" if unique_for is None else str(int(unique_for * 1000))
    if fair:  # it waits in fair:queue for its key's turn (worker.store.fair), as its member
        names += keys.fair_scripts[1:]
        member = encode_member(dict(job))
    args: list[Any] = [flags, IDEMPOTENCY_WINDOW_S, "" if due is None else repr(due), job_id, hold, member]
    if fair:
        args += [fair_key, GROUP]
    elif due is None:
        args += [x for pair in job.items() for x in pair]
    return names, args


def script_source() -> str:
    """The Lua source of ``enqueue_once`` (its includes in place)."""
    return source("enqueue_once")


def script(redis: Any) -> Script:
    """The ``enqueue_once`` script registered on ``redis`` (once per client)."""
    return registered(redis, "enqueue_once")


def ref_of(reply: Any) -> str:
    """What enqueue returns for the script's reply: the added job's entry id or member, or the holder's."""
    ref = reply[1]
    return ref.decode() if isinstance(ref, bytes) else str(ref)
