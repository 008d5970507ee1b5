"""During an incident: pause a kind, resume it, throttle it. Each is recorded (:mod:`opslib.actions`).

``pause(kind, *, reason, by=None)``
    Writes the pause (since, by, reason) into every partition's ``paused``.
    Within a second every worker stops starting the kind's jobs (running
    ones finish): each job it reads is parked (``parked``, in its order),
    and its retries and delayed jobs that fall due are parked too. Nothing
    is dead-lettered or counted as a failure; other kinds run on.
``resume(kind, *, reason=None, by=None)``
    Removes the pause from every partition, then puts the parked jobs back
    on ``jobs`` in their order (unpark script); workers start them at once.
``throttle(kind, per_s, *, reason, by=None)``
    Across all workers together, at most ``per_s`` of the kind's jobs start
    a second (a token bucket per kind); ``per_s=None`` lifts opslib's
    setting (the kind's own ``rate_limit``, if it declares one, applies
    again). The jobs the old setting deferred are released at once, to be
    judged by the new one (the workers' token script reads the rate in force).

Each returns a one-row frame: kind, action, by, reason, entries (int64: jobs
released by a resume, else 0), per_s (float64, a throttle's rate), at.

Example::

    >>> opslib.pause("render_tickets", reason="seat map fix, INC-2214")
                 kind action   by                  reason  entries  per_s                               at
    0  render_tickets  pause  ana  seat map fix, INC-2214        0    NaN 2026-11-30 21:40:12.104000+00:00
"""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime
from typing import Any

import pandas as pd
import redis

from opslib.actions import Action, record_action
from opslib.columns import COUNT, TEXT, TIME, typed_frame
from opslib.connection import partitions, redis_session
from opslib.errors import OpslibError
from opslib.kinds import check_known_kind, held_back
from opslib.moves.batches import partition_scripts
from opslib.operator import Operator

DONE_COLUMNS = {
    "kind": TEXT,
    "action": TEXT,
    "by": TEXT,
    "reason": TEXT,
    "entries": COUNT,
    "per_s": "float64",
    "at": TIME,
}
#: Far enough ahead that every deferred job is due: releasing ``throttled`` is a promotion of it all.
EVERYTHING_DUE_S = 10**9
NEEDS = "pausing and throttling need a user that may write the queue's keys and run its scripts (HSET, EVALSHA)"


def _done(kind: str, action: str, operator: Operator, entries: int = 0, per_s: float | None = None) -> pd.DataFrame:
    columns: dict[str, list[Any]] = {
        "kind": [kind],
        "action": [action],
        "by": [operator.by],
        "reason": [operator.reason or ""],
        "entries": [entries],
        "per_s": [math.nan if per_s is None else per_s],
        "at": [pd.Timestamp.now(tz="UTC")],
    }
    return typed_frame(columns, DONE_COLUMNS)


def pause(
    kind: str, *, reason: str, by: str | None = None, client: redis.Redis | None = None, prefix: str | None = None
) -> pd.DataFrame:
    """Stop every worker from starting ``kind``'s jobs until :func:`resume`; they wait, in order."""
    operator = Operator.acting("pause", by=by, reason=reason)
    with redis_session(client, prefix, "pause a kind", NEEDS) as (redis_client, keys):
        parts = partitions(redis_client, keys)
        check_known_kind(kind, redis_client, keys, parts)
        paused, _throttles = held_back(redis_client, parts[0])
        if kind in paused:
            since, whom = paused[kind].get("since", "?"), paused[kind].get("by", "?")
            raise OpslibError(f"{kind} is already paused (since {since}, by {whom}); nothing changed")
        record = json.dumps({"since": datetime.now(UTC).isoformat(), "by": operator.by, "reason": operator.reason})
        pipe = redis_client.pipeline(transaction=False)
        for part in parts:
            pipe.hset(part.paused, kind, record)
        pipe.execute()
        record_action(redis_client, keys, Action("pause", operator, kind))
    return _done(kind, "pause", operator)


def resume(
    kind: str,
    *,
    reason: str | None = None,
    by: str | None = None,
    client: redis.Redis | None = None,
    prefix: str | None = None,
) -> pd.DataFrame:
    """Lift ``kind``'s pause and put its parked jobs back on the queue, in their order."""
    operator = Operator.acting("resume", by=by, reason=reason, required=False)
    with redis_session(client, prefix, "resume a kind", NEEDS) as (redis_client, keys):
        parts = partitions(redis_client, keys)
        paused, _throttles = held_back(redis_client, parts[0])
        if kind not in paused:
            check_known_kind(kind, redis_client, keys, parts)
            listed = ", ".join(sorted(paused)) or "none"
            raise OpslibError(f"{kind} is not paused, so there is nothing to resume (paused kinds: {listed})")
        released = 0
        for scripts in partition_scripts(redis_client, parts):
            redis_client.hdel(scripts.keys.paused, kind)
            while (moved := int(scripts.unpark(kind, 100))) > 0:
                released += moved
        record_action(redis_client, keys, Action("resume", operator, kind, entries=released))
    return _done(kind, "resume", operator, released)


def check_rate(per_s: object) -> float | None:
    """``per_s`` when it is a rate (a number > 0) or None (lift)."""
    if per_s is None:
        return None
    if isinstance(per_s, bool) or not isinstance(per_s, int | float) or not math.isfinite(per_s) or per_s <= 0:
        raise OpslibError(
            f"per_s must be jobs a second > 0 (e.g. 10 or 0.5), or None to lift the throttle; got {per_s!r}. "
            "To stop a kind altogether, pause it"
        )
    return float(per_s)


def throttle(
    kind: str,
    per_s: float | None,
    *,
    reason: str | None = None,
    by: str | None = None,
    client: redis.Redis | None = None,
    prefix: str | None = None,
) -> pd.DataFrame:
    """Let at most ``per_s`` of ``kind``'s jobs start a second across all workers; ``per_s=None`` lifts it."""
    rate = check_rate(per_s)
    operator = Operator.acting("throttle", by=by, reason=reason, required=rate is not None)
    with redis_session(client, prefix, "throttle a kind", NEEDS) as (redis_client, keys):
        parts = partitions(redis_client, keys)
        _paused, throttles = held_back(redis_client, parts[0])
        if rate is None and kind not in throttles:
            check_known_kind(kind, redis_client, keys, parts)
            listed = ", ".join(sorted(throttles)) or "none"
            raise OpslibError(f"{kind} has no throttle set by opslib, so there is none to lift (throttled: {listed})")
        check_known_kind(kind, redis_client, keys, parts)
        pipe = redis_client.pipeline(transaction=False)
        if rate is None:
            pipe.hdel(keys.throttles, kind)
        else:
            since = datetime.now(UTC).isoformat()
            record = {"per_s": rate, "since": since, "by": operator.by, "reason": operator.reason}
            pipe.hset(keys.throttles, kind, json.dumps(record))
        pipe.delete(keys.bucket(kind))  # the new rate starts with a full bucket and no deferred turns
        pipe.execute()
        _release_deferred(redis_client, parts)
        record_action(redis_client, keys, Action("throttle", operator, kind, detail={"per_s": rate}))
    return _done(kind, "throttle", operator, per_s=rate)


def _release_deferred(client: Any, parts: list[Any]) -> None:
    """Put every job a throttle deferred back on ``jobs`` now (each partition's ``throttled``)."""
    for scripts in partition_scripts(client, parts):
        while scripts.promote(time.time() + EVERYTHING_DUE_S, 100, throttled=True) == 100:
            pass
