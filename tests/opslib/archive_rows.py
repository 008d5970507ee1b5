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
from psycopg.types.json import Jsonb

from opslib.columns import entry_times
from opslib.signatures import error_type, signature
from worker.archive.table import TABLE, fields_to_json, migrate
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


def archive_dead_stream(r: redis.Redis, keys: Keys, database_url: str) -> int:
    """Copy every entry of ``jobs:dead`` into the archive as the archiver would (status dead); return how many."""
    entries = r.xrange(keys.dead)
    rows = []
    for (entry_id, raw), dead_at in zip(entries, entry_times([e[0].decode() for e in entries]), strict=True):
        fields = {name.decode(): value.decode() for name, value in raw.items()}
        attempts = fields.get("attempts", "")
        rows.append(
            {
                "queue": keys.prefix,
                "dead_id": entry_id.decode(),
                "dead_at": dead_at.to_pydatetime(),
                "kind": fields.get("kind", ""),
                "job_id": fields.get("job_id") or fields.get("outbox_id", ""),
                "attempts": int(attempts) if attempts.isdigit() else None,
                "reason": fields.get("reason", ""),
                "error_type": error_type(fields.get("error", "")),
                "error": fields.get("error", ""),
                "signature": signature(fields.get("error", "")),
                "traceback": fields.get("traceback", ""),
                "worker": fields.get("worker", ""),
                "fields": Jsonb(fields_to_json(raw.items())),
            }
        )
    with psycopg.connect(database_url, autocommit=True) as conn:
        migrate(conn)
        insert_rows(conn, rows)
    return len(rows)
