"""Are the tables there? The check a worker makes at start instead of running DDL.

DDL runs only in ``python -m worker migrate`` and an application's own
migrate command (e.g. ``python -m myapp migrate``), as a role that may create
tables (the migrator); the worker's own role has DML only. So at start a worker asks PostgreSQL whether the tables it
writes exist, with every column it writes, in its connection's search path,
and says which command creates them when they do not (``ARCHIVE_MIGRATE=on``,
the embedded stack's default, migrates at start instead). The catalog is read
through ``to_regclass`` and ``pg_attribute``: no privilege on a table is
needed to see it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from worker.errors import WorkerError

#: Each named table's columns (none: the table is missing), and the schema a bare name resolves to first.
COLUMNS_OF = """
SELECT name, current_schema(),
       array(SELECT attname::text FROM pg_attribute
             WHERE attrelid = to_regclass(name) AND attnum > 0 AND NOT attisdropped)
FROM unnest(%s::text[]) AS name
"""


class NotMigrated(WorkerError):
    """A table the worker writes is missing, or lacks a column: the migrate command was not run."""


def problem(rows: Sequence[tuple[str, str, list[str]]], wanted: dict[str, tuple[str, ...]], command: str) -> str:
    """One line naming what is missing and the command that creates it; "" when nothing is."""
    missing_tables: list[str] = []
    missing_columns: list[str] = []
    schema = rows[0][1] if rows else "public"
    for name, _schema, columns in rows:
        if not columns:
            missing_tables.append(name)
            continue
        missing_columns += [f"{name}.{column}" for column in wanted[name] if column not in columns]
    if missing_tables:
        what = f"table{'s' if len(missing_tables) > 1 else ''} {', '.join(missing_tables)} not found"
    elif missing_columns:
        what = f"column{'s' if len(missing_columns) > 1 else ''} {', '.join(missing_columns)} not found"
    else:
        return ""
    return (
        f"{what} in schema {schema} (the search path's first); create them with `{command}` "
        "as a role that may run DDL, then start again"
    )


def check(conn: Any, wanted: dict[str, tuple[str, ...]], command: str) -> None:
    """Raise :class:`NotMigrated` unless every table of ``wanted`` exists with its columns (a psycopg connection)."""
    with conn.transaction():
        rows = conn.execute(COLUMNS_OF, (list(wanted),)).fetchall()
    if found := problem(rows, wanted, command):
        raise NotMigrated(found)


async def check_async(conn: Any, wanted: dict[str, tuple[str, ...]], command: str) -> None:
    """:func:`check` on an asyncio psycopg connection."""
    async with conn.transaction():
        rows = await (await conn.execute(COLUMNS_OF, (list(wanted),))).fetchall()
    if found := problem(rows, wanted, command):
        raise NotMigrated(found)
