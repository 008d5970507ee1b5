"""The dead-letter archive: PostgreSQL table ``dead_letters``, owned by the queue.

Every entry of ``jobs:dead`` gets one row, written by the archiver chore before
the dead stream's cap may trim the entry, and kept after a replay or a discard
with what became of it. The row holds the entry's fields exactly as they were
on the wire (``fields``, see :func:`fields_to_json`) so the job can be rebuilt
from the archive alone, and the columns an analyst filters and groups by.

=================  ==========================================================
column             holds
=================  ==========================================================
queue              the queue's key prefix (``QUEUE_PREFIX``; '' by default)
partition          the partition whose ``jobs:dead`` held the entry (0 with one)
dead_id            the entry id in ``jobs:dead``
dead_at            when it died (the entry id's milliseconds)
kind, job_id       ``job_id`` is the job's ``job_id``, else its ``outbox_id``
attempts           attempts made (NULL when the field was not a number)
reason             exhausted | permanent | poison | malformed | unknown_kind
error_type, error  ``Type`` and ``Type: message``
signature          the error with its variable parts replaced (failure groups)
traceback, worker, request_id, trace   as on the entry
fields             every field as on the wire (jsonb; see fields_to_json)
status             dead | replayed | discarded
replayed_at, replay_batch, replay_new_id, replay_outcome (succeeded |
failed again), replay_dead_id (the new dead entry when it failed again)
discarded_at, discarded_by, discard_reason, discard_batch (one id per discard call)
archived_at        when the row was written
=================  ==========================================================

``python -m worker migrate`` and every worker's start apply :data:`DDL` (and the operators' audit
table's, :mod:`worker.archive.actions_table`)
(idempotent, under an advisory lock so workers starting together do not race).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from worker.archive.actions_table import ACTIONS_DDL
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

#: One key for every migration of the queue's tables (pg_advisory_xact_lock); Stagedoor's differs.
MIGRATION_LOCK = 5_147_200_302

# The words of the status and replay_outcome columns (worker.store.vocabulary owns them).
STATUS_DEAD = ARCHIVED_DEAD
STATUS_REPLAYED = ARCHIVED_REPLAYED
STATUS_DISCARDED = ARCHIVED_DISCARDED
OUTCOME_SUCCEEDED = STATUS_SUCCEEDED
OUTCOME_FAILED_AGAIN = STATUS_FAILED_AGAIN

DDL = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    queue          text        NOT NULL,
    partition      smallint    NOT NULL DEFAULT 0,
    dead_id        text        NOT NULL,
    dead_at        timestamptz NOT NULL,
    kind           text        NOT NULL DEFAULT '',
    job_id         text        NOT NULL DEFAULT '',
    attempts       integer,
    reason         text        NOT NULL DEFAULT '',
    error_type     text        NOT NULL DEFAULT '',
    error          text        NOT NULL DEFAULT '',
    signature      text        NOT NULL DEFAULT '',
    traceback      text        NOT NULL DEFAULT '',
    worker         text        NOT NULL DEFAULT '',
    request_id     text,
    trace          text,
    fields         jsonb       NOT NULL,
    status         text        NOT NULL DEFAULT '{STATUS_DEAD}'
                   CHECK (status IN ('{STATUS_DEAD}', '{STATUS_REPLAYED}', '{STATUS_DISCARDED}')),
    replayed_at    timestamptz,
    replay_batch   text,
    replay_new_id  text,
    replay_outcome text CHECK (replay_outcome IN ('{OUTCOME_SUCCEEDED}', '{OUTCOME_FAILED_AGAIN}')),
    replay_dead_id text,
    discarded_at   timestamptz,
    discarded_by   text,
    discard_reason text,
    discard_batch  text,
    archived_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, partition, dead_id)
);
CREATE INDEX IF NOT EXISTS {TABLE}_kind_dead_at ON {TABLE} (queue, kind, dead_at);
-- Covers opslib.history(): an index-only scan reads ~60 bytes a row, not the heap's tracebacks.
CREATE INDEX IF NOT EXISTS {TABLE}_dead_at ON {TABLE} (queue, dead_at)
    INCLUDE (kind, replayed_at, discarded_at, replay_outcome);
CREATE INDEX IF NOT EXISTS {TABLE}_signature ON {TABLE} (queue, signature);
CREATE INDEX IF NOT EXISTS {TABLE}_replay_batch ON {TABLE} (replay_batch) WHERE replay_batch IS NOT NULL;
"""


def migrate(conn: psycopg.Connection[Any]) -> None:
    """Create what is missing of the queue's tables in ``conn``'s current schema, in one transaction."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute(DDL)
        conn.execute(ACTIONS_DDL)


async def migrate_async(conn: psycopg.AsyncConnection[Any]) -> None:
    """:func:`migrate` on an asyncio connection (the archiver's, at worker start)."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        await conn.execute(DDL)
        await conn.execute(ACTIONS_DDL)


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
