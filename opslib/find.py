"""Where a job is now: ``opslib.find(value)`` and ``python -m opslib find VALUE``.

``value`` is a job id, an outbox id, a stream entry id (of ``jobs`` or
``jobs:dead``) or a payload value such as an order id; it is compared whole
(``"4471"`` does not find order ``44712``: for text inside a field, use
``dead_letters(search=...)``). Every partition is looked at, then the
archive:

=============  ==============================================================
where          the job
=============  ==============================================================
unique         holds the unique key ``value`` of its kind (``unique:<kind>:<value>``,
               for the kinds of the other rows and those the live workers run):
               ``job_id`` the holder, ``id`` what its enqueue returned, ``at``
               since when, ``run_at`` when ``unique_for`` ends (if given)
waiting        is on ``jobs``, not yet read by a worker; or, with a fair key,
               waits in ``fair:queue`` for its key's turn (``status`` names the key)
running        was read by ``worker`` and is not acknowledged: its idle time
               (``idle``) is since delivery or the last claim refresh
finished       is on ``jobs`` and acknowledged: it succeeded, or was moved to
               ``delayed`` or ``jobs:dead`` (see the other rows)
delayed        waits in ``delayed`` until ``run_at`` (a retry or a later run)
dead           is in ``jobs:dead`` (``id``, ``reason``, ``error``)
cancelled      was cancelled (``opslib.cancel``): ``status`` says ``cancelled by
               <who>`` (it was running) or ``removed by <who>`` (it had not
               started), ``reason`` why, ``at`` when
archived       is in the archive only: ``status`` says replayed, discarded or dead
=============  ==============================================================

One row per place the value was found, in that order; no row when it is
nowhere. ``matched`` names the field that held the value (``id``, ``job_id``,
``outbox_id``, ``trace``, ``order_id``...), so that job 41 and order 41 are
told apart. The archive is read when ``ARCHIVE_URL`` / ``DATABASE_URL`` (or
``conn=``) point at one; when it cannot be read, ``attrs["notes"]`` says so
and the rest is still returned. ``jobs`` and ``delayed`` are searched in pages,
up to :data:`opslib.bounded.CAP` entries each (oldest first): past that,
``attrs["notes"]`` says how many were searched of how many.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd
import redis

from opslib.archive import archive
from opslib.bounded import Scan, stream_entries, zset_members
from opslib.columns import DURATION, TEXT, TIME, typed_frame
from opslib.connection import partitions, redis_session
from opslib.errors import OpslibError
from opslib.frames import DEAD_COLUMNS, delayed_to_frame, entry_order
from opslib.kinds import declared_kinds
from opslib.queries import dead_letters
from opslib.search import payload_columns
from worker.store.cancels import marks_of
from worker.store.fair import FAIR_FIELD
from worker.store.keys import GROUP, Keys, partition_of
from worker.store.unique import UNIQUE_KEY, lock_of, route_of
from worker.store.wire import decode_member, job_id_of, text

WAITING, RUNNING, FINISHED, DELAYED, DEAD, ARCHIVED = "waiting", "running", "finished", "delayed", "dead", "archived"
CANCELLED, UNIQUE = "cancelled", "unique"
FIND_COLUMNS = {
    "where": TEXT,
    "kind": TEXT,
    "job_id": TEXT,
    "id": TEXT,
    "at": TIME,
    "worker": TEXT,
    "idle": DURATION,
    "run_at": TIME,
    "reason": TEXT,
    "error": TEXT,
    "status": TEXT,
    "partition": "int64",
    "matched": TEXT,
}
"""``id``: the entry id (on ``jobs`` or ``jobs:dead``); ``at``: when it got where it is (added to ``jobs``,
dead); ``job_id``: the job id, or the outbox id when the outbox relay published it."""
ID_COLUMNS = ("job_id", "outbox_id", "request_id", "trace", "trace_id")


def find_to_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """The ``find()`` frame of one mapping per place found (missing columns empty)."""
    found = list(rows)
    columns = {name: [row.get(name) for row in found] for name in FIND_COLUMNS}
    columns["partition"] = [row.get("partition", -1) for row in found]
    for name in ("kind", "job_id", "id", "worker", "reason", "error", "status", "matched"):
        columns[name] = [value or "" for value in columns[name]]
    return typed_frame(columns, FIND_COLUMNS)


def matched_field(fields: Mapping[str, Any], value: str, entry_id: str = "") -> str:
    """The name of the first field of ``fields`` equal to ``value`` (``id`` when it is the entry id)."""
    if entry_id == value:
        return "id"
    return next((str(name) for name, held in fields.items() if held == value), "")


def matches(frame: pd.DataFrame, value: str) -> pd.Series:
    """Rows of a ``dead_letters()`` or ``archive()`` frame whose id, job ids or payload field equal ``value``."""
    hit = pd.Series(frame.index == value, index=frame.index)
    for name in [*ID_COLUMNS, *payload_columns(frame)]:
        if name in frame.columns:
            hit |= frame[name].astype("object") == value
    return hit


def on_jobs(client: Any, keys: Keys, value: str, notes: list[str]) -> list[dict[str, Any]]:
    """The entries of one partition's ``jobs`` holding ``value`` (id or any field), with what became of each,
    among the first :data:`~opslib.bounded.CAP` (read in pages; ``notes`` says when there were more)."""
    wanted = value.encode()
    scan = Scan(f"jobs ({keys.jobs})")
    hits = [
        (text(entry_id), fields)
        for entry_id, fields in stream_entries(client, keys.jobs, scan)
        if text(entry_id) == value or wanted in fields.values()
    ]
    if scan.capped:
        notes.append(scan.note(client.xlen(keys.jobs)).replace("counted", "searched"))
    if not hits:
        return []
    groups = {text(g["name"]): g for g in client.xinfo_groups(keys.jobs)}
    delivered = text(groups[GROUP]["last-delivered-id"]) if GROUP in groups else "0-0"
    rows = []
    for entry_id, raw in hits:
        fields = {text(k): text(v) for k, v in raw.items()}
        row = {
            "kind": fields.get("kind", ""),
            "job_id": job_id_of(fields),
            "id": entry_id,
            "at": pd.Timestamp(int(entry_id.partition("-")[0]), unit="ms", tz="UTC"),
            "partition": keys.partition,
            "matched": matched_field(fields, value, entry_id),
            "lock": lock_of(keys, fields),
        }
        pending = (
            client.xpending_range(keys.jobs, GROUP, min=entry_id, max=entry_id, count=1) if GROUP in groups else []
        )
        if pending:
            row |= {"where": RUNNING, "worker": text(pending[0]["consumer"])}
            row["idle"] = pd.Timedelta(milliseconds=int(pending[0]["time_since_delivered"]))
        elif entry_order(entry_id) > entry_order(delivered):
            row["where"] = WAITING
        else:
            row["where"] = FINISHED
        rows.append(row)
    return rows


def on_delayed(client: Any, keys: Keys, value: str, notes: list[str]) -> list[dict[str, Any]]:
    """The jobs of one partition's ``delayed`` whose job id or a field is ``value``, among the
    :data:`~opslib.bounded.CAP` soonest (read in pages; ``notes`` says when there were more).

    Only members holding ``value``'s text (or its JSON form) are decoded and checked whole: decoding every
    member into a ``delayed()`` frame was most of a ``find()`` on a large backlog."""
    scan = Scan(f"delayed ({keys.delayed})")
    candidates = [
        (member, score)
        for member, score in zset_members(client, keys.delayed, scan, withscores=True)
        if may_hold(member, value)
    ]
    if scan.capped:
        notes.append(scan.note(client.zcard(keys.delayed)))
    found = delayed_to_frame(candidates, time.time(), keys.partition)
    return [
        {
            "where": DELAYED,
            "kind": job.kind,
            "job_id": job.job_id,
            "run_at": job.run_at,
            "partition": job.partition,
            "matched": "job_id" if job.job_id == value else matched_field(job.fields, value),
        }
        for job in found.itertuples()
        if value in job.fields.values() or job.job_id == value
    ]


def may_hold(member: str | bytes, value: str) -> bool:
    """Whether a JSON member (of ``delayed`` or ``fair:queue``) holds ``value``'s text or its JSON form: only
    those are decoded and checked whole."""
    raw = member if isinstance(member, bytes) else member.encode()
    return value.encode() in raw or json.dumps(value, ensure_ascii=False).encode() in raw


def on_fair(client: Any, keys: Keys, value: str, notes: list[str]) -> list[dict[str, Any]]:
    """The jobs of one partition's ``fair:queue`` (waiting for their fair key's turn) whose job id or a field
    is ``value``, among the :data:`~opslib.bounded.CAP` next turns."""
    scan = Scan(f"fair ({keys.fair_queue})")
    rows = []
    for member in zset_members(client, keys.fair_queue, scan):
        job = decode_member(member) if may_hold(member, value) else {}
        if job and (job_id_of(job) == value or value in job.values()):
            rows.append({
                "where": WAITING,
                "kind": job.get("kind", ""),
                "job_id": job_id_of(job),
                "status": f"fair key {job.get(FAIR_FIELD, '')!r}: waiting for its turn",
                "partition": keys.partition,
                "matched": "job_id" if job_id_of(job) == value else matched_field(job, value),
            })  # fmt: skip
    if scan.capped:
        notes.append(scan.note(client.zcard(keys.fair_queue)).replace("counted", "searched"))
    return rows


def on_unique(client: Any, parts: list[Keys], value: str, kinds: Iterable[str]) -> list[dict[str, Any]]:
    """The unique locks named ``value`` (``unique:<kind>:<value>``) of the ``kinds`` given, each read in the
    partition its kind and key go to: which job holds it (``job_id``; ``id``: what its enqueue returned),
    since when, and until when (``run_at``: ``unique_for``'s end, or none while only the job's terminal
    state ends it). Read by name, one HGETALL a kind: no SCAN of the keyspace."""
    rows = []
    for kind in sorted(set(kinds) - {""}):
        keys = parts[partition_of(route_of({"kind": kind, UNIQUE_KEY: value}), len(parts))]
        lock = {text(k): text(v) for k, v in client.hgetall(keys.unique(kind, value)).items()}
        if not lock:
            continue
        held = f"held until {'its job settles' if 'until' not in lock else 'its job settles and unique_for ends'}"
        rows.append(
            {
                "where": UNIQUE,
                "kind": kind,
                "job_id": lock.get("job", ""),
                "id": lock.get("ref", ""),
                "at": pd.Timestamp(int(lock.get("at", 0)), unit="ms", tz="UTC"),
                "run_at": pd.Timestamp(int(lock["until"]), unit="ms", tz="UTC") if "until" in lock else pd.NaT,
                "status": held,
                "partition": keys.partition,
                "matched": "unique_key",
            }
        )
    return rows


def find(value: str, *, client: redis.Redis | None = None, prefix: str | None = None, conn: Any = None) -> pd.DataFrame:
    """Where the job with this id, entry id, outbox id or payload value is now: one row per place (module
    docstring); none when it is nowhere.

    >>> opslib.find("4471")   # an order id: its render_tickets job, dead, and the email job that waits
    """
    if not isinstance(value, str) or not value.strip():
        raise OpslibError(f"find needs a job id, entry id, outbox id or payload value such as '4471', got {value!r}")
    value = value.strip()
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    later: list[dict[str, Any]] = []
    with redis_session(client, prefix, "look for the job") as (redis_client, keys):
        parts = partitions(redis_client, keys)
        for part in parts:
            rows += on_jobs(redis_client, part, value, notes)
            rows += [
                cancelled_row(value, mark, part.partition) for mark in marks_of(redis_client, part, [value]).values()
            ]
        for part in parts:
            rows += on_fair(redis_client, part, value, notes)
        for part in parts:
            later += on_delayed(redis_client, part, value, notes)
        rows += sorted(later, key=lambda job: job["run_at"])  # soonest first over the partitions, as delayed()
        dead = dead_letters(search=value, client=redis_client, prefix=keys.prefix)
        dead = dead[matches(dead, value)]
        kinds = {row.get("kind", "") for row in rows} | set(dead["kind"]) | set(declared_kinds(redis_client, keys))
        rows[:0] = on_unique(redis_client, parts, value, kinds)
    for dead_id, entry in dead.iterrows():
        rows.append(dead_row(DEAD, str(dead_id), entry) | {"matched": matched_column(entry, value, str(dead_id))})
    try:
        stored = archive(search=value, conn=conn, prefix=keys.prefix)
    except OpslibError as exc:
        notes.append(f"the archive was not read: {exc}")
    else:
        stored = stored[matches(stored, value) & ~stored.index.isin(dead.index)]
        for dead_id, entry in stored.iterrows():
            found = {"status": entry["status"], "matched": matched_column(entry, value, str(dead_id))}
            rows.append(dead_row(ARCHIVED, str(dead_id), entry) | found)
    frame = find_to_frame(rows)
    frame.attrs["notes"] = notes
    return frame


def cancelled_row(job_id: str, mark: Mapping[str, Any], partition: int) -> dict[str, Any]:
    """The row of a cancel's mark (:mod:`worker.store.cancels`)."""
    return {
        "where": CANCELLED,
        "job_id": job_id,
        "id": mark.get("entry_id", ""),
        "at": pd.Timestamp(mark["at"]) if mark.get("at") else pd.NaT,
        "reason": mark.get("reason", ""),
        "status": f"{mark.get('status', CANCELLED)} by {mark.get('by', '?')}",
        "partition": partition,
        "matched": "job_id",
    }


def dead_row(where: str, dead_id: str, entry: pd.Series) -> dict[str, Any]:
    """A found row for a dead letter (in ``jobs:dead`` or the archive)."""
    job_id = entry.get("job_id") or entry.get("outbox_id") or ""
    return {
        "where": where,
        "kind": entry["kind"],
        "job_id": job_id if isinstance(job_id, str) else "",
        "id": dead_id,
        "at": entry["dead_at"],
        "reason": entry["reason"],
        "error": entry["error"],
        "partition": entry.get("partition", -1),
    }


def matched_column(entry: pd.Series, value: str, dead_id: str) -> str:
    """The column of a dead letter's row (``dead_letters()`` / ``archive()``) that holds ``value`` whole, as
    :func:`matches` compares them."""
    names = [*ID_COLUMNS, *(name for name in entry.index if name not in DEAD_COLUMNS)]
    return matched_field({name: entry[name] for name in names if name in entry.index}, value, dead_id)
