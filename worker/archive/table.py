"""The dead-letter archive: PostgreSQL table ``dead_letters``, owned by the queue.

Every entry of ``jobs:dead`` gets one row, written by the archiver chore before
the dead stream's cap may trim the entry, and kept after a replay or a discard
with what became of it. The row holds the entry's fields exactly as they were
on the wire (``fields``, see :func:`fields_to_json`) so the job can be rebuilt
from the archive alone, and the columns an analyst filters and groups by.

Its columns are declared once, in :data:`COLUMNS` (name, SQL type, what the
column holds, who writes it): the DDL below, the archiver's insert
(:mod:`worker.archive.rows`) and opslib's select are all derived from that
declaration. A new column is one line there; an ``entry`` column also needs
its value in :func:`worker.archive.rows.dead_row` (a test fails until it has
one), and opslib's ``archive()`` frame says whether it shows it.

``python -m worker migrate`` applies :func:`migration` (idempotent, under an
advisory lock so that runs together do not race; the table is partitioned by
month, :mod:`worker.archive.months`); a worker applies it at start
only with ``ARCHIVE_MIGRATE=on`` (the embedded stack's default), and otherwise
checks that the table has every column (the operators' audit table,
:mod:`worker.archive.actions_table`, is created by the same migration) (:mod:`worker.archive.schema_check`),
so that its PostgreSQL role needs no DDL.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from worker.archive.actions_table import ACTIONS_DDL, ACTIONS_INDEX_DDL, ACTIONS_TABLE
from worker.archive.months import FUNCTIONS, ready_statements
from worker.store.vocabulary import (
    ARCHIVED_DEAD,
    ARCHIVED_DISCARDED,
    ARCHIVED_REPLAYED,
    STATUS_FAILED_AGAIN,
    STATUS_SUCCEEDED,
)

if TYPE_CHECKING:
    import psycopg  # imported where a connection is made: the worker's outcomes use this module's names only

TABLE = "dead_letters"

#: One key for every migration of the queue's tables (pg_advisory_xact_lock); an application's own
#: migrations take a key of their own.
MIGRATION_LOCK = 5_147_200_302

# The words of the status and replay_outcome columns (worker.store.vocabulary owns them).
STATUS_DEAD = ARCHIVED_DEAD
STATUS_REPLAYED = ARCHIVED_REPLAYED
STATUS_DISCARDED = ARCHIVED_DISCARDED
OUTCOME_SUCCEEDED = STATUS_SUCCEEDED
OUTCOME_FAILED_AGAIN = STATUS_FAILED_AGAIN

#: Who writes a column: ``entry`` the archiver's insert, from the dead entry (:func:`worker.archive.rows.dead_row`);
#: ``move`` a replay, a discard or a replayed job's outcome (:mod:`worker.archive.rows`, ``opslib.moves``);
#: ``table`` PostgreSQL (a default).
Writer = Literal["entry", "move", "table"]


@dataclass(frozen=True)
class Column:
    """One column of ``dead_letters``: its name, its SQL type with constraints, what it holds, who writes it."""

    name: str
    sql: str
    holds: str
    writer: Writer


_STATUS_CHECK = f"CHECK (status IN ('{STATUS_DEAD}', '{STATUS_REPLAYED}', '{STATUS_DISCARDED}'))"
_OUTCOME_CHECK = f"CHECK (replay_outcome IN ('{OUTCOME_SUCCEEDED}', '{OUTCOME_FAILED_AGAIN}'))"

#: The archive's columns, in table order: the one declaration the DDL, the insert and opslib's select read.
COLUMNS: tuple[Column, ...] = (
    Column("queue", "text NOT NULL", "the queue's key prefix (``QUEUE_PREFIX``; '' by default)", "entry"),
    Column(
        "partition", "smallint NOT NULL DEFAULT 0", "the partition whose ``jobs:dead`` held it (0 with one)", "entry"
    ),
    Column("dead_id", "text NOT NULL", "the entry id in ``jobs:dead``", "entry"),
    Column("dead_at", "timestamptz NOT NULL", "when it died (the entry id's milliseconds)", "entry"),
    Column("kind", "text NOT NULL DEFAULT ''", "the job's kind", "entry"),
    Column("job_id", "text NOT NULL DEFAULT ''", "the job's ``job_id``, else its ``outbox_id``", "entry"),
    Column("attempts", "integer", "attempts made (NULL when the field was not a number)", "entry"),
    Column("reason", "text NOT NULL DEFAULT ''", "exhausted | permanent | poison | malformed | unknown_kind", "entry"),
    Column("error_type", "text NOT NULL DEFAULT ''", "the error's ``Type``", "entry"),
    Column("error", "text NOT NULL DEFAULT ''", "``Type: message``", "entry"),
    Column("signature", "text NOT NULL DEFAULT ''", "the error with its variable parts replaced (groups)", "entry"),
    Column("traceback", "text NOT NULL DEFAULT ''", "as on the entry", "entry"),
    Column("worker", "text NOT NULL DEFAULT ''", "the worker that buried it", "entry"),
    Column("request_id", "text", "as on the entry", "entry"),
    Column("trace", "text", "as on the entry", "entry"),
    Column("trace_id", "text", "the trace of the span that created the job (its ``traceparent``'s)", "entry"),
    Column("span_id", "text", "that span (the parent of the job's first attempt)", "entry"),
    Column(
        "attempt_log",
        "jsonb",
        "the attempts' errors, oldest first: [{at, duration_s, worker, error}], the last 10 "
        "(``worker.store.attempt_log``; NULL when the entry carries none)",
        "entry",
    ),
    Column("fields", "jsonb NOT NULL", "every field as on the wire (see :func:`fields_to_json`)", "entry"),
    Column("status", f"text NOT NULL DEFAULT '{STATUS_DEAD}' {_STATUS_CHECK}", "dead | replayed | discarded", "move"),
    Column("replayed_at", "timestamptz", "when it was replayed", "move"),
    Column("replay_batch", "text", "the batch that replayed it", "move"),
    Column("replayed_by", "text", "who replayed it (``by=``, else the operating-system user)", "move"),
    Column("replay_new_id", "text", "its new entry on ``jobs``", "move"),
    Column("replay_outcome", f"text {_OUTCOME_CHECK}", "succeeded | failed again", "move"),
    Column("replay_dead_id", "text", "the new dead entry when it failed again", "move"),
    Column("discarded_at", "timestamptz", "when it was discarded", "move"),
    Column("discarded_by", "text", "who discarded it", "move"),
    Column("discard_reason", "text", "why", "move"),
    Column("discard_batch", "text", "one id per discard call", "move"),
    Column("archived_at", "timestamptz NOT NULL DEFAULT now()", "when the row was written", "table"),
)
COLUMN_NAMES = tuple(column.name for column in COLUMNS)
PRIMARY_KEY = ("queue", "partition", "dead_id")
#: The columns the archiver's insert fills, in :func:`worker.archive.rows.dead_row`'s order.
ENTRY_COLUMNS = tuple(column.name for column in COLUMNS if column.writer == "entry")

_WIDTH = max(map(len, COLUMN_NAMES)) + 1
#: The partitioned table and its default partition (see :mod:`worker.archive.months`); the month column
#: is in the key because PostgreSQL's unique keys of a partitioned table must hold the partition key.
DDL = (
    f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
"""
    + "".join(f"    {column.name.ljust(_WIDTH)}{column.sql},\n" for column in COLUMNS)
    + f"""    PRIMARY KEY ({", ".join(PRIMARY_KEY)}, dead_at)
) PARTITION BY RANGE (dead_at);
CREATE TABLE IF NOT EXISTS {TABLE}_default PARTITION OF {TABLE} DEFAULT;
"""
    # A column declared after the table was made is added to it (it must be nullable or have a default).
    + "".join(
        f"ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS {column.name} {column.sql};\n"
        for column in COLUMNS
        if column.name not in PRIMARY_KEY
    )
)
#: The readers' indexes, made after a conversion's copy (one build per partition, not a row at a time).
INDEX_DDL = f"""CREATE INDEX IF NOT EXISTS {TABLE}_kind_dead_at ON {TABLE} (queue, kind, dead_at);
-- Covers opslib.history()'s deaths: an index-only scan reads ~60 bytes a row, not the heap's tracebacks.
CREATE INDEX IF NOT EXISTS {TABLE}_dead_at ON {TABLE} (queue, dead_at)
    INCLUDE (kind, replayed_at, discarded_at, replay_outcome);
-- opslib.history()'s replays and discards in a window, whatever the age of the deaths they follow (index-only).
CREATE INDEX IF NOT EXISTS {TABLE}_replayed_at ON {TABLE} (queue, replayed_at)
    INCLUDE (kind, replay_outcome, dead_at) WHERE replayed_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS {TABLE}_discarded_at ON {TABLE} (queue, discarded_at)
    INCLUDE (kind, dead_at) WHERE discarded_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS {TABLE}_signature ON {TABLE} (queue, signature);
CREATE INDEX IF NOT EXISTS {TABLE}_replay_batch ON {TABLE} (replay_batch) WHERE replay_batch IS NOT NULL;
-- Retention's batches: the rows of one status past its age, without reading the others.
CREATE INDEX IF NOT EXISTS {TABLE}_status_dead_at ON {TABLE} (queue, status, dead_at);
"""
#: The whole migration, in order: an old unpartitioned table set aside, the partitioned tables made and
#: filled from it, the coming months' partitions (:func:`worker.archive.months.ready_statements`), then indexes.
SET_ASIDE = f"SELECT archive_set_aside('{TABLE}'), archive_set_aside('{ACTIONS_TABLE}')"
FILL = f"SELECT archive_fill('{TABLE}'), archive_fill('{ACTIONS_TABLE}')"


#: What a worker writes, for the check at its start: the table and every column.
WANTED = {TABLE: COLUMN_NAMES}
MIGRATE_COMMAND = "python -m worker migrate"


def migration(now: datetime) -> list[tuple[str, tuple[Any, ...]]]:
    """The statements of one migration at ``now``, in order (run in one transaction)."""
    return [
        ("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,)),
        (FUNCTIONS, ()),
        (SET_ASIDE, ()),
        (DDL, ()),
        (ACTIONS_DDL, ()),
        (FILL, ()),
        *ready_statements(now),
        (INDEX_DDL, ()),
        (ACTIONS_INDEX_DDL, ()),
    ]


def migrate(conn: psycopg.Connection[Any]) -> None:
    """Create what is missing of the queue's tables in ``conn``'s current schema, in one transaction,
    converting unpartitioned ones (:mod:`worker.archive.months`)."""
    with conn.transaction():
        for sql, params in migration(datetime.now(UTC)):
            conn.execute(sql, params or None)


async def migrate_async(conn: psycopg.AsyncConnection[Any]) -> None:
    """:func:`migrate` on an asyncio connection (the archiver's, at worker start)."""
    async with conn.transaction():
        for sql, params in migration(datetime.now(UTC)):
            await conn.execute(sql, params or None)


def migrate_url(database_url: str) -> None:
    """:func:`migrate` on a new connection to ``database_url`` (``python -m worker migrate``)."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        migrate(conn)


def _json_text(value: bytes) -> str | dict[str, str]:
    """``value`` as JSON text when it is UTF-8 without NUL (jsonb refuses \\u0000), else ``{"b64": ...}``."""
    try:
        decoded = value.decode("utf-8")
    except UnicodeDecodeError:
        decoded = None
    if decoded is None or "\x00" in decoded:
        return {"b64": base64.b64encode(value).decode("ascii")}
    return decoded


def _wire_bytes(value: str | Mapping[str, str]) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    return base64.b64decode(value["b64"])


def fields_to_json(fields: Iterable[tuple[bytes, bytes]]) -> list[list[Any]]:
    """The entry's fields, in order, as ``[[name, value], ...]`` for the ``fields`` column.

    A name or value that is not UTF-8 (or holds NUL) becomes ``{"b64": ...}``,
    so a malformed entry with binary fields is kept byte for byte.
    """
    return [[_json_text(name), _json_text(value)] for name, value in fields]


def fields_from_json(stored: Iterable[Any]) -> list[tuple[bytes, bytes]]:
    """The inverse of :func:`fields_to_json`: the entry's fields as bytes, in order."""
    return [(_wire_bytes(name), _wire_bytes(value)) for name, value in stored]
