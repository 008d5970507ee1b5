"""The SQL that writes the archive: a dead entry's row, and the log records applied to rows.

Pure: each function returns statements and parameters; the archiver (async)
and opslib (sync) run them on their own connections. Every statement is
idempotent, so a batch or a record applied twice (a worker killed between the
commit and the XACK or the log trim) changes nothing the second time:

* a row is inserted with ``ON CONFLICT DO NOTHING`` and never overwritten;
* a row leaves ``dead`` once (``UPDATE ... WHERE status = 'dead'``), so a
  replayed row never becomes discarded, nor the reverse;
* an outcome is written to the row of its replay batch only.

Applying records, the inserts come first, in dead id order, as the
archiver's batches insert them: two transactions that insert the same rows
wait for each other in the same order and never deadlock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from psycopg.types.json import Jsonb

from worker.archive.dead_log import EVENT_DISCARDED, EVENT_OUTCOME, EVENT_REPLAYED, Record
from worker.archive.table import (
    ENTRY_COLUMNS,
    STATUS_DEAD,
    STATUS_DISCARDED,
    STATUS_REPLAYED,
    TABLE,
    fields_to_json,
)
from worker.store import attempt_log
from worker.store.signatures import error_type, signature
from worker.store.trace_context import trace_ids

LOG_LOCK = 514_720_030
"""First key of ``pg_advisory_xact_lock(LOG_LOCK, hashtext(queue))``: one applier of a queue's log at a time
(the two-key form takes two int4)."""
MAX_ATTEMPTS = 2**31 - 1

#: The columns of a new row, in :func:`dead_row`'s order: those the table declares as written from the entry.
ROW_COLUMNS = ENTRY_COLUMNS
INSERT_ROW = (
    f"INSERT INTO {TABLE} ({', '.join(ROW_COLUMNS)}) VALUES ({', '.join(['%s'] * len(ROW_COLUMNS))})"
    " ON CONFLICT DO NOTHING"
)
#: A row by its key; ``dead_at`` (derived from the id, as the row was written) lets PostgreSQL look in the
#: row's month's partition only.
_KEY = "queue = %s AND partition = %s AND dead_id = %s AND dead_at = %s"
MARK_REPLAYED = (
    f"UPDATE {TABLE} SET status = '{STATUS_REPLAYED}', replayed_at = %s::timestamptz, replay_batch = %s,"
    f" replay_new_id = %s, replayed_by = NULLIF(%s, '') WHERE {_KEY} AND status = '{STATUS_DEAD}'"
)
MARK_DISCARDED = (
    f"UPDATE {TABLE} SET status = '{STATUS_DISCARDED}', discarded_at = %s::timestamptz, discarded_by = %s,"
    f" discard_reason = %s, discard_batch = %s WHERE {_KEY} AND status = '{STATUS_DEAD}'"
)
SET_OUTCOME = (
    f"UPDATE {TABLE} SET replay_outcome = %s, replay_dead_id = NULLIF(%s, '') WHERE {_KEY} AND replay_batch = %s"
)
TAKE_LOG_LOCK = "SELECT pg_advisory_xact_lock(%s::int4, hashtext(%s))"
TRY_LOG_LOCK = "SELECT pg_try_advisory_xact_lock(%s::int4, hashtext(%s))"

Statement = tuple[str, Sequence[Any]]


def _text(value: bytes | None) -> str:
    """A field as text PostgreSQL accepts: bad UTF-8 escaped, NUL written as ``\\x00``."""
    if value is None:
        return ""
    return value.decode("utf-8", "backslashreplace").replace("\x00", "\\x00")


def _attempts(value: bytes | None) -> int | None:
    if value is None or not value.isdigit() or len(value) > 10:
        return None
    number = int(value)
    return number if number <= MAX_ATTEMPTS else None


def _attempt_log(value: bytes | None) -> Jsonb | None:
    """The ``attempt_log`` column: the field's attempts (well-formed ones only), NULL when there are none."""
    attempts = attempt_log.parse(_text(value)) if value is not None else []
    return Jsonb(attempts) if attempts else None


def dead_at(dead_id: str) -> datetime:
    """When the entry died: the milliseconds of its id."""
    return datetime.fromtimestamp(int(dead_id.partition("-")[0]) / 1000, tz=UTC)


def dead_row(queue: str, partition: int, dead_id: str, fields: Sequence[tuple[bytes, bytes]]) -> tuple[Any, ...]:
    """The archive row of one dead entry of ``partition``'s ``jobs:dead`` (in :data:`ROW_COLUMNS` order)
    from its wire fields."""
    named = dict(fields)
    error = _text(named.get(b"error"))
    request_id, trace = named.get(b"request_id"), named.get(b"trace")
    trace_id, span_id = trace_ids(_text(named.get(b"traceparent")))
    row = {
        "queue": queue,
        "partition": partition,
        "dead_id": dead_id,
        "dead_at": dead_at(dead_id),
        "kind": _text(named.get(b"kind")),
        "job_id": _text(named.get(b"job_id") or named.get(b"outbox_id")),
        "attempts": _attempts(named.get(b"attempts")),
        "reason": _text(named.get(b"reason")),
        "error_type": error_type(error),
        "error": error,
        "signature": signature(error),
        "traceback": _text(named.get(b"traceback")),
        "worker": _text(named.get(b"worker")),
        "request_id": None if request_id is None else _text(request_id),
        "trace": None if trace is None else _text(trace),
        "trace_id": trace_id or None,
        "span_id": span_id or None,
        "attempt_log": _attempt_log(named.get(attempt_log.FIELD.encode())),
        "fields": Jsonb(fields_to_json(fields)),
    }
    return tuple(row[name] for name in ROW_COLUMNS)


def record_statements(queue: str, partition: int, records: Iterable[Record]) -> list[Statement]:
    """The statements that apply ``records`` of ``partition``'s ``jobs:dead:log`` (in log order) to the archive."""
    records = list(records)
    carried = {r.dead_id: r.entry for r in records if r.entry is not None}
    statements: list[Statement] = [
        (INSERT_ROW, dead_row(queue, partition, dead_id, carried[dead_id]))
        for dead_id in sorted(carried, key=_id_order)
    ]
    for record in records:
        key = (queue, partition, record.dead_id, dead_at(record.dead_id))
        meta = record.meta
        if record.event == EVENT_REPLAYED:
            replayed = (meta.get("at"), meta.get("batch"), meta.get("new_id"), meta.get("by", ""))
            statements.append((MARK_REPLAYED, (*replayed, *key)))
        elif record.event == EVENT_DISCARDED:
            statements.append(
                (MARK_DISCARDED, (meta.get("at"), meta.get("by"), meta.get("reason"), meta.get("batch"), *key))
            )
        elif record.event == EVENT_OUTCOME:
            statements.append(
                (SET_OUTCOME, (meta.get("outcome"), meta.get("replay_dead_id", ""), *key, meta.get("batch")))
            )
    return statements


def runs(statements: Iterable[Statement]) -> list[tuple[str, list[Sequence[Any]]]]:
    """Consecutive statements with the same SQL grouped, in order, for ``executemany`` (one pipelined
    round trip per group instead of one per statement)."""
    grouped: list[tuple[str, list[Sequence[Any]]]] = []
    for sql, params in statements:
        if grouped and grouped[-1][0] == sql:
            grouped[-1][1].append(params)
        else:
            grouped.append((sql, [params]))
    return grouped


def _id_order(entry_id: str) -> tuple[int, int]:
    """Sort key of a dead id: a stream entry id, or a cancelled job's ``<ms>-<seq>-cancelled``."""
    millis, _, rest = entry_id.partition("-")
    return int(millis), int(rest.partition("-")[0] or 0)
