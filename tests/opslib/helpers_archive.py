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
import redis

from worker.archive import rows
from worker.archive.rows import ROW_COLUMNS
from worker.archive.table import TABLE, migrate
from worker.store.keys import Keys


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
    wire = [(name.encode(), value.encode()) for name, value in fields.items()]
    return dict(zip(ROW_COLUMNS, rows.dead_row(queue, 0, dead_id, wire), strict=True)) | life


def insert_rows(conn: psycopg.Connection[Any], rows: Iterable[dict[str, Any]]) -> None:
    for row in rows:
        names = ", ".join(row)
        values = ", ".join(f"%({name})s" for name in row)
        conn.execute(f"INSERT INTO {TABLE} ({names}) VALUES ({values})", row)


def at(hour: int, minute: int = 0, day: int = 30) -> datetime:
    """A time on the night of the tests (2026-11-``day``), UTC."""
    return datetime(2026, 11, day, hour, minute, tzinfo=UTC)


def archive_dead_stream(r: redis.Redis, keys: Keys, database_url: str) -> int:
    """Copy every entry of ``jobs:dead`` into the archive as the archiver would (status dead); return how many."""
    entries = r.xrange(keys.dead)
    with psycopg.connect(database_url, autocommit=True) as conn:
        migrate(conn)
        for entry_id, raw in entries:
            conn.execute(
                rows.INSERT_ROW, rows.dead_row(keys.prefix, keys.partition, entry_id.decode(), list(raw.items()))
            )
    return len(entries)
