"""Pure converters from Redis replies to DataFrames (no I/O: tested without Redis).

Each ``*_to_frame`` takes what redis-py returned (bytes or, for a client made
with ``decode_responses=True``, str) and builds a frame with the fixed
columns of its ``*_COLUMNS`` map; :mod:`opslib.queries` does the reading.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from opslib.columns import COUNT, DURATION, FLAG, OBJECT, TEXT, TIME, entry_times, typed_frame
from worker.observability.queue_state import Consumer
from worker.store.queues import DEFAULT_QUEUE
from worker.store.signatures import error_type, signature
from worker.store.trace_context import TRACE_FIELDS, TRACEPARENT, trace_ids
from worker.store.vocabulary import (
    DISCARD_DISCARDED,
    DISCARD_WOULD_DISCARD,
    RECORDED_FAILED,
    RECORDED_RETRYING,
    RECORDED_SUCCEEDED,
    REPLAY_MISSING,
    REPLAY_REPLAYED,
    REPLAY_WOULD_REPLAY,
    STATUS_FAILED_AGAIN,
    STATUS_RETRYING,
    STATUS_STILL_QUEUED,
    STATUS_SUCCEEDED,
    WHERE_DEAD,
    WHERE_DELAYED,
    WHERE_JOBS,
)
from worker.store.wire import decode_member, job_id_of, json_object, text

Entry = tuple[bytes | str, Mapping[Any, Any]]
"""A stream entry as redis-py returns it: its id and its fields."""
RawEntry = Entry | Sequence[Any]
"""Also the raw reply's ``[id, [field, value, ...]]``."""

_TRACE_COLUMNS = ("trace_id", "span_id")
#: ``dead_letters()``: index ``dead_id`` (str), then these, then the payload's own fields (str, NaN where absent).
DEAD_COLUMNS = {
    "dead_at": TIME,
    "kind": TEXT,
    "job_id": TEXT,
    "outbox_id": TEXT,
    "attempts": COUNT,
    "reason": TEXT,
    "error_type": TEXT,
    "error": TEXT,
    "signature": TEXT,
    "traceback": TEXT,
    "worker": TEXT,
    "request_id": TEXT,
    "trace": TEXT,
    "trace_id": TEXT,
    "span_id": TEXT,
    "replay_of": TEXT,
    "replay_batch": TEXT,
    "replays": COUNT,
    "attempt_log": TEXT,
    "partition": COUNT,
    "queue": TEXT,
}
#: Wire fields that are not payload: the columns above that come from a field, ``failed_at`` (= dead_at) and the
#: trace fields (``trace_id`` and ``span_id`` are read from ``traceparent``).
DEAD_WIRE_FIELDS = frozenset(DEAD_COLUMNS) - {
    "dead_at",
    "error_type",
    "signature",
    "partition",
    "queue",
    *_TRACE_COLUMNS,
} | {
    "failed_at",
    *TRACE_FIELDS,
}
_DEAD_TEXT_FIELDS = [name for name in DEAD_COLUMNS if name in DEAD_WIRE_FIELDS and name not in ("attempts", "replays")]


def trace_columns(rows: Sequence[Mapping[str, str]]) -> tuple[list[str], list[str]]:
    """The ``trace_id`` and ``span_id`` columns of entries: their ``traceparent``'s ids ("" without one)."""
    found = [trace_ids(row.get(TRACEPARENT)) for row in rows]
    return [trace_id for trace_id, _ in found], [span_id for _, span_id in found]


def add_payload_columns(
    columns: dict[str, Sequence[Any]], rows: Sequence[Mapping[str, Any]], fixed: Mapping[str, Any]
) -> None:
    """Add a column per payload field of the dead letters ``rows`` (the fields not on the dead-letter
    wire), in name order; one named like a ``fixed`` column is shown as ``field:<name>``."""
    for name in sorted({name for row in rows for name in row} - DEAD_WIRE_FIELDS):
        shown = f"field:{name}" if name in fixed else name
        columns[shown] = [row.get(name) for row in rows]


def whole_number(value: str) -> int:
    """A decimal field as an int; 0 when it is missing or not a whole number."""
    return int(value) if value.isascii() and value.isdigit() and len(value) < 19 else 0


def fields_of(raw: Mapping[Any, Any]) -> dict[str, str]:
    """A stream entry's fields as a str -> str dict."""
    return {text(name): text(value) for name, value in raw.items()}


def dead_to_frame(raw: Iterable[RawEntry], partition: int = 0, queue: str = DEFAULT_QUEUE) -> pd.DataFrame:
    """The ``dead_letters()`` frame of XRANGE entries of ``partition``'s ``jobs:dead`` in the named ``queue``
    (see :data:`DEAD_COLUMNS`).

    Each entry is ``(id, {field: value})`` as redis-py returns it, or the raw
    reply's ``[id, [field, value, ...]]``.

    ``job_id`` is the job's identity as the worker reads it
    (:func:`worker.store.wire.job_id_of`: its ``job_id``, else its ``outbox_id``),
    as ``pending()`` and ``delayed()`` show it; ``outbox_id`` is the wire
    field itself. Absent wire fields are ``""``; ``attempts`` is 0 when
    absent or not a number, and so is ``replays`` (how many times the job was
    replayed before it died this time: a dead letter with ``replays`` > 0 failed
    again after a replay, and ``replay_of`` names the dead entry it came from);
    ``attempt_log`` is the errors of its attempts since it was enqueued or
    replayed, as on the wire (compact JSON, oldest first, the last 10:
    ``worker.store.attempt_log.parse`` reads it; ``show()`` prints it), ``""``
    for an entry that never ran; a payload field that an entry lacks is NaN. A
    payload field named like a computed column (``dead_at``, ``error_type``,
    ``signature``) is shown as ``field:<name>``.
    """
    ids: list[str] = []
    rows: list[dict[str, str]] = []
    for entry_id, fields in raw:
        pairs = fields.items() if isinstance(fields, Mapping) else zip(fields[::2], fields[1::2], strict=True)
        if isinstance(entry_id, bytes):  # decoded here, not by text(): 10,000 entries have 150,000 fields
            ids.append(entry_id.decode())
            rows.append(
                {k.decode("utf-8", "backslashreplace"): v.decode("utf-8", "backslashreplace") for k, v in pairs}
            )
        else:
            ids.append(entry_id)
            rows.append(dict(pairs))
    columns: dict[str, Sequence[Any]] = {name: [row.get(name, "") for row in rows] for name in _DEAD_TEXT_FIELDS}
    columns["job_id"] = [job_id_of(row) for row in rows]
    columns["dead_at"] = entry_times(ids)
    columns["attempts"] = [whole_number(row.get("attempts", "")) for row in rows]
    columns["replays"] = [whole_number(row.get("replays", "")) for row in rows]
    signatures: dict[str, str] = {}
    for error in columns["error"]:
        if error not in signatures:
            signatures[error] = signature(error)
    columns["signature"] = [signatures[error] for error in columns["error"]]
    columns["error_type"] = [error_type(error) for error in columns["error"]]
    columns["partition"] = [partition] * len(ids)
    columns["queue"] = [queue] * len(ids)
    columns["trace_id"], columns["span_id"] = trace_columns(rows)
    add_payload_columns(columns, rows, DEAD_COLUMNS)
    return typed_frame(columns, DEAD_COLUMNS, index=pd.Index(ids, dtype=TEXT, name="dead_id"))


#: ``pending()``: index ``id`` (str, the entry on ``jobs``), then these.
PENDING_COLUMNS = {
    "kind": TEXT,
    "job_id": TEXT,
    "consumer": TEXT,
    "idle": DURATION,
    "deliveries": COUNT,
    "partition": COUNT,
    "queue": TEXT,
}


def pending_to_frame(
    pending: Iterable[Mapping[str, Any]],
    entries: Mapping[str, Mapping[Any, Any] | None],
    partition: int = 0,
    queue: str = DEFAULT_QUEUE,
) -> pd.DataFrame:
    """The ``pending()`` frame of XPENDING rows and the entries they name (None: entry gone).

    ``pending`` holds redis-py's ``xpending_range`` dicts (``message_id``,
    ``consumer``, ``time_since_delivered`` in ms, ``times_delivered``).
    """
    ids, kinds, job_ids, consumers, idle, deliveries = [], [], [], [], [], []
    for row in pending:
        entry_id = text(row["message_id"])
        fields = fields_of(entries.get(entry_id) or {})
        ids.append(entry_id)
        kinds.append(fields.get("kind", ""))
        job_ids.append(job_id_of(fields))
        consumers.append(text(row["consumer"]))
        idle.append(pd.Timedelta(milliseconds=int(row["time_since_delivered"])))
        deliveries.append(int(row["times_delivered"]))
    columns = {
        "kind": kinds,
        "job_id": job_ids,
        "consumer": consumers,
        "idle": idle,
        "deliveries": deliveries,
        "partition": [partition] * len(ids),
        "queue": [queue] * len(ids),
    }
    return typed_frame(columns, PENDING_COLUMNS, index=pd.Index(ids, dtype=TEXT, name="id"))


#: ``pending_counts()``: one row per (consumer, kind), the most pending first.
PENDING_COUNT_COLUMNS = {
    "queue": TEXT,
    "consumer": TEXT,
    "kind": TEXT,
    "pending": COUNT,
    "beyond_reclaim": COUNT,
    "oldest_idle": DURATION,
}


def pending_counts_to_frame(pending: pd.DataFrame, reclaim_idle: pd.Timedelta) -> pd.DataFrame:
    """Counts of a ``pending()`` frame by consumer and kind; ``beyond_reclaim``: idle >= ``reclaim_idle``."""
    if pending.empty:
        return typed_frame({}, PENDING_COUNT_COLUMNS)
    stale = pending.assign(beyond=pending["idle"] >= reclaim_idle)
    grouped = stale.groupby(["queue", "consumer", "kind"], sort=True)
    counts = grouped.agg(
        pending=("deliveries", "size"), beyond_reclaim=("beyond", "sum"), oldest_idle=("idle", "max")
    ).reset_index()
    counts = counts.sort_values("pending", ascending=False, kind="stable", ignore_index=True)
    return typed_frame({name: counts[name].tolist() for name in PENDING_COUNT_COLUMNS}, PENDING_COUNT_COLUMNS)


#: ``delayed()``: one row per member of ``delayed``, the soonest first; ``fields`` holds the job's whole field map.
DELAYED_COLUMNS = {
    "run_at": TIME,
    "kind": TEXT,
    "job_id": TEXT,
    "attempts": COUNT,
    "due": FLAG,
    "fields": OBJECT,
    "partition": COUNT,
    "queue": TEXT,
}


def delayed_to_frame(
    members: Iterable[tuple[bytes | str, float]], now_s: float, partition: int = 0, queue: str = DEFAULT_QUEUE
) -> pd.DataFrame:
    """The ``delayed()`` frame of ``ZRANGE ... WITHSCORES`` pairs; ``due``: run time <= ``now_s``.

    A member that is not a JSON object of strings shows as
    ``{"malformed_delayed": <member>}`` with kind ``""``, as the worker will
    dead-letter it.
    """
    run_at, kinds, job_ids, attempts, due, all_fields = [], [], [], [], [], []
    for member, score in members:
        try:
            fields = decode_member(member)
        except ValueError:
            fields = {"malformed_delayed": text(member)}
        run_at.append(float(score))
        kinds.append(fields.get("kind", ""))
        job_ids.append(job_id_of(fields))
        attempts.append(whole_number(fields.get("attempts", "")))
        due.append(float(score) <= now_s)
        all_fields.append(fields)
    columns = {
        "run_at": pd.to_datetime(run_at, unit="s", utc=True),
        "kind": kinds,
        "job_id": job_ids,
        "attempts": attempts,
        "due": due,
        "fields": all_fields,
        "partition": [partition] * len(due),
        "queue": [queue] * len(due),
    }
    return typed_frame(columns, DELAYED_COLUMNS)


#: ``queue_stats().consumers``: one row per consumer of group ``workers``.
CONSUMER_COLUMNS = {"consumer": TEXT, "pending": COUNT, "idle": DURATION, "heartbeat": FLAG}


def consumers_to_frame(consumers: Iterable[Consumer]) -> pd.DataFrame:
    """The group's consumers as a frame; ``heartbeat``: the worker's heartbeat key exists (it is running)."""
    rows = list(consumers)
    columns: dict[str, list[Any]] = {
        "consumer": [c.name for c in rows],
        "pending": [c.pending for c in rows],
        "idle": [pd.Timedelta(milliseconds=c.idle_ms) for c in rows],
        "heartbeat": [c.live for c in rows],
    }
    return typed_frame(columns, CONSUMER_COLUMNS)


#: ``replay()`` and ``replay_kind()``: one row per dead id asked for.
REPLAY_COLUMNS = {"dead_id": TEXT, "new_id": TEXT, "status": TEXT, "batch": TEXT, "partition": COUNT}


def replay_to_frame(
    dead_ids: Sequence[str],
    results: Sequence[bytes | str | bool | None],
    batch: str,
    dry_run: bool,
    partitions: Sequence[int] | None = None,
) -> pd.DataFrame:
    """The replay frame of each dead id and what its move returned (the new id, or None: gone).

    ``partitions`` holds each id's partition (-1: found in none); all 0 when None.

    In a dry run ``results`` holds, for each id, a truthy value when the
    entry exists; ``new_id`` is then ``""`` and ``batch`` is ``""`` (nothing
    was written).
    """
    new_ids, statuses = [], []
    for result in results:
        if not result:
            new_ids.append("")
            statuses.append(REPLAY_MISSING)
        elif isinstance(result, bytes | str) and not dry_run:
            new_ids.append(text(result))
            statuses.append(REPLAY_REPLAYED)
        else:
            new_ids.append("")
            statuses.append(REPLAY_WOULD_REPLAY)
    columns: dict[str, Sequence[Any]] = {
        "dead_id": list(dead_ids),
        "new_id": new_ids,
        "status": statuses,
        "batch": [batch] * len(dead_ids),
        "partition": list(partitions) if partitions is not None else [0] * len(dead_ids),
    }
    frame = typed_frame(columns, REPLAY_COLUMNS)
    frame.attrs["batch"] = batch
    return frame


#: ``discard()`` and ``discard_kind()``: one row per dead id asked for.
DISCARD_COLUMNS = {"dead_id": TEXT, "status": TEXT, "batch": TEXT, "partition": COUNT}


def discard_to_frame(
    dead_ids: Sequence[str],
    found: Sequence[bool],
    batch: str,
    dry_run: bool,
    partitions: Sequence[int] | None = None,
) -> pd.DataFrame:
    """The discard frame: for each dead id, whether it was (or, in a dry run, would be) taken, and
    its partition (-1: found in none; all 0 when ``partitions`` is None)."""
    taken = DISCARD_WOULD_DISCARD if dry_run else DISCARD_DISCARDED
    statuses = [taken if hit else REPLAY_MISSING for hit in found]
    columns: dict[str, Sequence[Any]] = {
        "dead_id": list(dead_ids),
        "status": statuses,
        "batch": [batch] * len(dead_ids),
        "partition": list(partitions) if partitions is not None else [0] * len(dead_ids),
    }
    frame = typed_frame(columns, DISCARD_COLUMNS)
    frame.attrs["batch"] = batch
    return frame


#: ``replay_status()``: one row per dead id of the batch.
STATUS_COLUMNS = {
    "dead_id": TEXT,
    "status": TEXT,
    "where": TEXT,
    "attempts": COUNT,
    "error": TEXT,
    "new_dead_id": TEXT,
    "updated_at": TIME,
    "batch": TEXT,
    "partition": COUNT,
}


def archived_status_to_frame(batch: str, rows: Iterable[Sequence[Any]]) -> pd.DataFrame:
    """:func:`replay_status_to_frame`'s columns from the archive's rows of a batch Redis has forgotten:
    (partition, dead_id, replay_outcome, replay_dead_id, replayed_at, and the error, attempts and dead_at
    of the entry it failed again as). An outcome the archive never got reads "still queued"."""
    rows = list(rows)
    columns: dict[str, list[Any]] = {
        "dead_id": [row[1] for row in rows],
        "status": [row[2] or STATUS_STILL_QUEUED for row in rows],
        "where": [WHERE_DEAD if row[2] == STATUS_FAILED_AGAIN else "" for row in rows],
        "attempts": [row[6] or 0 for row in rows],
        "error": [row[5] or "" for row in rows],
        "new_dead_id": [row[3] or "" for row in rows],
        "updated_at": [pd.Timestamp(row[7] or row[4]) if (row[7] or row[4]) else pd.NaT for row in rows],
        "batch": [batch] * len(rows),
        "partition": [row[0] for row in rows],
    }
    return typed_frame(columns, STATUS_COLUMNS)


def entry_order(entry_id: str) -> tuple[int, int]:
    """Sort key of a stream entry id: (milliseconds, sequence)."""
    millis, _, seq = entry_id.partition("-")
    return (int(millis), int(seq or 0)) if millis.isdigit() and seq.isdigit() else (0, 0)


def parse_outcome(raw: bytes | str) -> dict[str, Any]:
    """A value of the ``replay:<batch>`` hash as a dict (``{}`` when it is not a JSON object)."""
    return json_object(raw)


def replay_status_to_frame(
    batch: str,
    outcomes: Mapping[Any, Any],
    dead_again: Iterable[Entry],
    queued_where: Mapping[str, str],
    delayed_of: Iterable[str],
    partition: int = 0,
) -> pd.DataFrame:
    """Combine what the worker recorded with where each replayed job is now (in one partition).

    ``outcomes``: the ``replay:<batch>`` hash (dead id -> JSON with
    ``status`` queued / succeeded / retrying / failed, written by the replay
    script and then by the worker). ``dead_again``: entries of ``jobs:dead``
    carrying this batch (they failed again, also where the worker recorded
    nothing: a poison or malformed burial). ``queued_where``: for jobs not run
    yet, ``"jobs"`` (undelivered), ``"running"`` (delivered, pending) or
    ``""`` (not found). ``delayed_of``: dead ids whose job waits in ``delayed``.

    ``status`` is succeeded, failed again, retrying or still queued;
    ``where`` is ``jobs:dead``, ``delayed``, ``jobs``, ``running`` or ``""``
    (done, or not found); ``attempts`` counts the failed attempts since the
    replay; ``updated_at`` is NaT until the worker recorded an outcome.
    Rows are in dead id order.
    """
    recorded = {text(dead_id): parse_outcome(value) for dead_id, value in outcomes.items()}
    again = {}
    for entry_id, raw in dead_again:
        fields = fields_of(raw)
        again[fields.get("replay_of", "")] = (text(entry_id), fields)
    waiting = set(delayed_of)
    order = sorted(set(recorded) | (set(again) - {""}), key=entry_order)
    columns: dict[str, list[Any]] = {name: [] for name in STATUS_COLUMNS}
    for dead_id in order:
        outcome = recorded.get(dead_id, {})
        status, where, attempts = STATUS_STILL_QUEUED, queued_where.get(dead_id, ""), 0
        error, new_dead_id = str(outcome.get("error", "")), ""
        updated_at = pd.Timestamp(outcome["at"]) if outcome.get("at") else pd.NaT
        if dead_id in again:
            new_dead_id, fields = again[dead_id]
            status, where, error = STATUS_FAILED_AGAIN, WHERE_DEAD, fields.get("error", "")
            attempts = whole_number(fields.get("attempts", ""))
            if updated_at is pd.NaT:
                updated_at = entry_times([new_dead_id])[0]
        elif outcome.get("status") == RECORDED_FAILED:
            status, where, new_dead_id = STATUS_FAILED_AGAIN, "", str(outcome.get("dead_id") or "")
        elif outcome.get("status") == RECORDED_SUCCEEDED:
            status, where = STATUS_SUCCEEDED, ""
        elif outcome.get("status") == RECORDED_RETRYING:
            status, where = STATUS_RETRYING, WHERE_DELAYED if dead_id in waiting else WHERE_JOBS
            attempts = whole_number(str(outcome.get("attempts", "")))
        for name, value in zip(
            STATUS_COLUMNS,
            (dead_id, status, where, attempts, error, new_dead_id, updated_at, batch, partition),
            strict=True,
        ):
            columns[name].append(value)
    return typed_frame(columns, STATUS_COLUMNS)


def select_dead(frame: pd.DataFrame, mask: pd.Series) -> pd.DataFrame:
    """The rows of a ``dead_letters()`` frame where ``mask`` holds, without payload columns left all empty."""
    kept = frame[mask]
    empty = [name for name in kept.columns[len(DEAD_COLUMNS) :] if kept[name].isna().all()]
    return kept.drop(columns=empty)


def combine(frames: Sequence[pd.DataFrame], order_by: str | None = None) -> pd.DataFrame:
    """The frames of each partition as one: rows in ``order_by`` order (stable), fixed columns first,
    then payload columns (a dead letter's own fields) sorted by name. One frame is returned as it is."""
    if len(frames) == 1:
        return frames[0]
    fixed = list(frames[0].columns)
    whole = pd.concat(frames)
    if frames[0].index.name == "dead_id":
        fixed = fixed[: len(DEAD_COLUMNS)]
        fixed += sorted(set(whole.columns) - set(fixed))
    whole = whole[fixed]
    if order_by is not None:
        whole = whole.sort_values(order_by, kind="stable")
    if whole.index.name is None:
        whole = whole.reset_index(drop=True)
    return whole
