"""Rows of the dead-letter archive for the opslib tests, written straight into ``dead_letters``.

The archiver chore is not what these tests are about: they put rows in the
table the way it does (the wire fields through ``fields_to_json``) and read
them back through opslib.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from opslib.signatures import error_type, signature
from worker.archive_table import TABLE, fields_to_json


def dead_row(
    dead_at: datetime,
    kind: str,
    *,
    seq: int = 0,
    queue: str = "",
    error: str = "SeatLabelInvalid: '14-C' is not a row letter and a seat number",
    payload: dict[str, str] | None = None,
    **life: Any,
) -> dict[str, Any]:
    """One archived dead entry: id from ``dead_at``, the wire fields it would have had, and ``life`` after death."""
    dead_id = f"{int(dead_at.timestamp() * 1000)}-{seq}"
    fields = {"kind": kind, "job_id": f"job-{dead_id}", "attempts": "2", **(payload or {})}
    fields |= {"error": error, "traceback": "Traceback ...", "reason": "exhausted", "worker": "worker-1"}
    fields["failed_at"] = dead_at.isoformat()
    return {
        "queue": queue,
        "dead_id": dead_id,
        "dead_at": dead_at,
        "kind": kind,
        "job_id": fields["job_id"],
        "attempts": 2,
        "reason": "exhausted",
        "error_type": error_type(error),
        "error": error,
        "signature": signature(error),
        "traceback": "Traceback ...",
        "worker": "worker-1",
        "fields": Jsonb(fields_to_json((k.encode(), v.encode()) for k, v in fields.items())),
        **life,
    }


def insert_rows(conn: psycopg.Connection[Any], rows: Iterable[dict[str, Any]]) -> None:
    for row in rows:
        names = ", ".join(row)
        values = ", ".join(f"%({name})s" for name in row)
        conn.execute(f"INSERT INTO {TABLE} ({names}) VALUES ({values})", row)


def at(hour: int, minute: int = 0, day: int = 30) -> datetime:
    """A time on the night of the tests (2026-11-``day``), UTC."""
    return datetime(2026, 11, day, hour, minute, tzinfo=UTC)
