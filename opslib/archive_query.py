"""The one way opslib runs a query on the dead-letter archive, and the kinds it holds.

:mod:`opslib.archive` (its frames) and :mod:`opslib.kinds` (the kinds a
name is checked against) both read through here, so neither imports the
other for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg

from opslib.connection import pg_session, readable_archive_url
from opslib.errors import OpslibError
from worker.archive.table import TABLE


def read_archive(conn: Any, query: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """The rows of a query on the archive; its errors become an :class:`OpslibError` saying what to do."""
    try:
        with pg_session(conn, readable_archive_url, "ARCHIVE_URL") as connection:
            return connection.execute(query, params).fetchall()
    except psycopg.errors.UndefinedTable:
        raise OpslibError(
            f"the archive's table {TABLE} is not in this database; the workers create it when they start "
            "with the archive on (or run `python -m worker migrate`). Check ARCHIVE_URL / DATABASE_URL, or conn="
        ) from None
    except psycopg.Error as exc:
        raise OpslibError(f"reading the archive failed: {str(exc).strip()}") from None


def archive_kinds(conn: Any, queue: str) -> set[str]:
    """The kinds the archive holds for ``queue`` (an error path: it reads the kind index whole)."""
    rows = read_archive(conn, f"SELECT DISTINCT kind FROM {TABLE} WHERE queue = %(queue)s", {"queue": queue})
    return {kind for (kind,) in rows}
