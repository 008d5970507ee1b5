"""The kinds of the queue: what the live workers declare, what the queue holds of each, and what is held back.

A kind is known when a live worker declares it (``kinds:<worker>``, written
beside its heartbeat with the same expiry), or the queue or the archive has
seen it. :func:`check_known_kind` judges the names people type that way, for
every opslib function that acts on a kind.

``kinds()`` columns (index ``kind``, sorted): workers (int64: live workers
running it), queue (str: the named queue it is declared in, ``default`` when
no live worker declares it; the counts are over every queue), retries
(Int64), base_s, cap_s, timeout_s, rate_limit (float64,
NaN when no live worker declares the kind or it has none), waiting (int64:
on ``jobs``, not yet read, or in ``fair:queue`` waiting for its fair key's
turn), running (int64: delivered, not acknowledged), delayed, parked
(waiting for resume), throttled (deferred by the throttle), dead (int64),
last_succeeded_at (datetime64[ns, UTC]: the latest success a live worker saw
since it started; NaT for none), paused (bool), paused_since (datetime64[ns, UTC]), paused_by,
paused_reason (str), throttle_per_s (float64: the rate in force, opslib's
or the kind's own ``rate_limit``; NaN for none), version (Int64: the highest
payload version a live worker runs; NA when none declares the kind),
awaiting (int64: jobs handed back to wait in ``delayed`` because no live
worker of their named queue runs their kind or version), awaiting_versions
(str: which versions they carry, named with their queue unless it is
``default``, e.g. ``v2: 20, bulk v2: 3``; docs/worker.md, "Changing a kind's payload safely"). The counts are of at most
:data:`opslib.bounded.CAP` entries of each structure (read in pages, so that no
call stalls Redis); ``attrs["notes"]`` says which structure was cut short.

Example::

    >>> opslib.kinds()[["workers", "waiting", "paused", "paused_reason"]]
                    workers  waiting  paused          paused_reason
    kind
    render_tickets        2       40    True  seat map fix, INC-2214
    send_email            2        0   False
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

import pandas as pd
import psycopg
import redis

from opslib.archive_query import archive_kinds
from opslib.bounded import Scan, stream_entries, zset_members
from opslib.checks import check_kind, queue_kinds
from opslib.columns import COUNT, FLAG, TEXT, TIME, typed_frame
from opslib.connection import archive_url, partitions, pg_session, readable_archive_url, redis_session
from opslib.errors import OpslibError
from opslib.frames import parse_outcome
from opslib.pending_reads import read_pending
from worker.store.awaiting import awaited
from worker.store.heartbeats import live_workers
from worker.store.keys import GROUP, Keys
from worker.store.queues import DEFAULT_QUEUE
from worker.store.wire import decode_member, text

FLOAT = "float64"
POLICY = {"retries": "Int64", "base_s": FLOAT, "cap_s": FLOAT, "timeout_s": FLOAT, "rate_limit": FLOAT}
COUNTS = ("waiting", "running", "delayed", "parked", "throttled", "dead")
KIND_COLUMNS = {
    "workers": COUNT,
    "queue": TEXT,
    **POLICY,
    **dict.fromkeys(COUNTS, COUNT),
    "last_succeeded_at": TIME,
    "paused": FLAG,
    "paused_since": TIME,
    "paused_by": TEXT,
    "paused_reason": TEXT,
    "throttle_per_s": FLOAT,
    "version": "Int64",
    "awaiting": COUNT,
    "awaiting_versions": TEXT,
}
KNOWN_WHERE = "the live workers declare or the queue or archive has seen"


def declared_kinds(client: Any, keys: Keys) -> dict[str, dict[str, Any]]:
    """Each kind a live worker declares: its policy (as the last worker read declares it) and ``workers``."""
    names = sorted(live_workers(client, keys))
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.get(keys.declared(name))
    found: dict[str, dict[str, Any]] = {}
    for name, raw in zip(names, pipe.execute() if names else [], strict=True):
        try:
            declared = json.loads(raw) if raw else {}
        except ValueError:
            continue
        for kind, policy in declared.get("kinds", {}).items():
            entry = found.setdefault(kind, {"workers": [], "last_succeeded_at": None, "version": 1})
            last = max(filter(None, (entry["last_succeeded_at"], policy.get("last_succeeded_at"))), default=None)
            entry.update(policy, last_succeeded_at=last, version=max(entry["version"], policy.get("version", 1)))
            entry["workers"].append(name)
    return found


def held_back(client: Any, keys: Keys) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The pauses (partition 0's ``paused``) and opslib's throttles: kind -> what was recorded."""
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.paused)
    pipe.hgetall(keys.throttles)
    paused, throttles = pipe.execute()
    return _records(paused), _records(throttles)


def _records(raw: dict[Any, Any]) -> dict[str, dict[str, Any]]:
    return {text(kind): parse_outcome(value) for kind, value in raw.items()}


def parked_kinds(client: Any, parts: Iterable[Keys], notes: list[str] | None = None) -> Counter[str]:
    """How many jobs of each kind wait in ``parked`` (the kind is each member's first part), of the first
    :data:`~opslib.bounded.CAP` of each partition (a line in ``notes`` says when that cut it short)."""
    counts: Counter[str] = Counter()
    for keys in parts:
        scan = Scan(keys.parked)
        for member in zset_members(client, keys.parked, scan):
            counts[text(member).partition("\0")[0]] += 1
        if scan.capped and notes is not None:
            notes.append(scan.note(client.zcard(keys.parked)))
    return counts


def archived_or_declared(conn: Any, queue: str, client: Any, prefix: str | None) -> set[str]:
    """The kinds the archive holds for ``queue`` and those the live workers declare: a kind nothing of
    which was archived yet is known (``archive --kind send_email`` is empty, not a typo). Redis away: the
    archive's alone."""
    try:
        with redis_session(client, prefix, "read the kinds the workers declare") as (redis_client, keys):
            declared = set(declared_kinds(redis_client, keys))
    except OpslibError:
        declared = set()
    return archive_kinds(conn, queue) | declared


def archive_kinds_if_any(queue: str) -> set[str]:
    """The kinds the archive has seen, or none when it is off or away (the other sources still count)."""
    try:
        url = archive_url()
        if url is None:
            return set()
        with pg_session(url, readable_archive_url, "ARCHIVE_URL") as conn:
            return archive_kinds(conn, queue)
    except (OpslibError, psycopg.Error):
        return set()


def known_kinds(client: Any, keys: Keys, parts: list[Keys]) -> set[str]:
    """Every kind that counts as known (see the module docstring)."""
    return (
        set(declared_kinds(client, keys))
        | queue_kinds(client, parts)
        | set(parked_kinds(client, parts))
        | archive_kinds_if_any(keys.prefix)
    )


def check_known_kind(kind: object, client: Any, keys: Keys, parts: list[Keys]) -> str:
    """``kind`` when it is known, an :class:`OpslibError` with the near miss otherwise (the live workers'
    declarations are read first: the queue and the archive only when they do not name it)."""
    declared = declared_kinds(client, keys)
    return check_kind(kind, declared, lambda: known_kinds(client, keys, parts), holder=KNOWN_WHERE)


def awaiting_key(queue: str, kind: str, version: str) -> tuple[str, tuple[bool, str]]:
    """Where a job handed back to wait (:func:`worker.store.awaiting.awaited`) is counted in
    ``awaiting_versions``: its kind, then its version named with its queue unless that is ``default``
    (``v2``, ``bulk v2``; ``default``'s sort first)."""
    named = queue != DEFAULT_QUEUE
    return kind, (named, f"{queue} v{version}" if named else f"v{version}")


def _counts(client: Any, parts: list[Keys], notes: list[str]) -> dict[str, Counter[Any]]:
    """Per kind: waiting, running, delayed, throttled and dead jobs over every partition (parked apart), each
    structure read in pages up to :data:`~opslib.bounded.CAP` (``notes`` says which were cut short)."""
    counts: dict[str, Counter[Any]] = {name: Counter() for name in (*COUNTS, "awaiting", "awaiting_v")}
    for keys in parts:
        last, lag = "0-0", None
        try:
            for group in client.xinfo_groups(keys.jobs):
                if text(group["name"]) == GROUP:
                    last, lag = text(group["last-delivered-id"]), group.get("lag")
        except redis.exceptions.ResponseError:
            pass
        for name, stream, start in (("waiting", keys.jobs, f"({last}"), ("dead", keys.dead, "-")):
            scan = Scan(f"{name} ({stream})")
            for _id, fields in stream_entries(client, stream, scan, start):
                counts[name][text(fields.get(b"kind", b""))] += 1
            if scan.capped:  # the undelivered total is the group's lag (None before Redis 7)
                notes.append(scan.note(lag if name == "waiting" else client.xlen(stream)))
        for name, zset in (("delayed", keys.delayed), ("throttled", keys.throttled), ("waiting", keys.fair_queue)):
            scan = Scan(f"{name} ({zset})")
            for member in zset_members(client, zset, scan):
                try:
                    job = decode_member(member)
                except ValueError:
                    continue
                counts[name][job.get("kind", "")] += 1
                waits = awaited(job) if zset == keys.delayed else None  # a throttled one waits for its turn
                if waits is not None:  # handed back: no live worker of the queue runs it
                    counts["awaiting"][waits[0]] += 1
                    counts["awaiting_v"][awaiting_key(keys.queue, *waits)] += 1
            if scan.capped:
                notes.append(scan.note(client.zcard(zset)))
    counts["running"] = Counter(read_pending(client, parts)["kind"])
    counts["parked"] = parked_kinds(client, parts, notes)
    return counts


def kinds(*, client: redis.Redis | None = None, prefix: str | None = None) -> pd.DataFrame:
    """One row per known kind: who runs it, its policy, what the queue holds of it, and what holds it back."""
    with redis_session(client, prefix, "read the kinds") as (redis_client, keys):
        parts = partitions(redis_client, keys)
        declared = declared_kinds(redis_client, keys)
        paused, throttles = held_back(redis_client, parts[0])
        notes: list[str] = []
        counts = _counts(redis_client, parts, notes)
    named = {k for name in COUNTS for k in counts[name]}
    names = sorted((set(declared) | set(paused) | set(throttles) | named) - {""})
    columns: dict[str, list[Any]] = {name: [] for name in KIND_COLUMNS}
    for kind in names:
        policy = declared.get(kind, {})
        pause = paused.get(kind)
        columns["workers"].append(len(policy.get("workers", [])))
        columns["queue"].append(policy.get("queue", DEFAULT_QUEUE))
        for name in POLICY:
            value = policy.get(name)
            columns[name].append(pd.NA if value is None and name == "retries" else value)
        for name in COUNTS:
            columns[name].append(counts[name][kind])
        last = policy.get("last_succeeded_at")
        columns["last_succeeded_at"].append(pd.Timestamp(last, unit="s", tz="UTC") if last else pd.NaT)
        columns["paused"].append(pause is not None)
        columns["paused_since"].append(pd.to_datetime((pause or {}).get("since"), errors="coerce", utc=True))
        columns["paused_by"].append((pause or {}).get("by", ""))
        columns["paused_reason"].append((pause or {}).get("reason", ""))
        rate = throttles.get(kind, {}).get("per_s") or policy.get("rate_limit")
        columns["throttle_per_s"].append(rate)
        columns["version"].append(policy.get("version", pd.NA))
        columns["awaiting"].append(counts["awaiting"][kind])
        waits = sorted((where, n) for (of, where), n in counts["awaiting_v"].items() if of == kind)
        columns["awaiting_versions"].append(", ".join(f"{where[1]}: {n}" for where, n in waits))
    frame = typed_frame(columns, KIND_COLUMNS, index=pd.Index(names, dtype=TEXT, name="kind"))
    frame.attrs["notes"] = notes
    return frame


def check_kind_known(kind: object, *, client: redis.Redis | None = None, prefix: str | None = None) -> str:
    """:func:`check_known_kind` with a client from the environment (the CLI's runbook checks its kind)."""
    with redis_session(client, prefix, "read the kinds") as (redis_client, keys):
        return check_known_kind(kind, redis_client, keys, partitions(redis_client, keys))
