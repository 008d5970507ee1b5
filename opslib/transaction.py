"""A data fix one can look at before it counts: statements on one PostgreSQL connection, one transaction.

``opslib.sql`` on its own runs read-only. A fix goes in a transaction, where
it is seen before it counts::

    with opslib.transaction() as tx:
        fixed = tx.sql("UPDATE seats SET label = ... WHERE ... RETURNING id, label", [seat_map_id])
        display(fixed)                      # the rows as they will be
        if len(fixed) != 40:
            tx.rollback()                   # nothing changed
    # here: committed, unless the block raised or called tx.rollback()

The block commits when it ends, and rolls back when it raises (the exception
goes on) or after ``tx.rollback()`` (then further ``tx.sql`` calls are
refused). ``tx.status`` says which: ``open``, ``committed`` or ``rolled back``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pandas as pd
import psycopg

from opslib.connection import connect_postgres, database_url
from opslib.errors import OpslibError
from opslib.queries import sql

OPEN, COMMITTED, ROLLED_BACK = "open", "committed", "rolled back"


class Transaction:
    """Statements on one connection inside one transaction (make it with :func:`transaction`)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.status = OPEN

    def sql(self, query: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> pd.DataFrame:
        """The rows of ``query`` run in this transaction (as :func:`opslib.sql`; nothing commits yet)."""
        if self.status != OPEN:
            raise OpslibError(
                f"this transaction is {self.status}; run further statements in a new `with opslib.transaction()`"
            )
        try:
            return sql(query, params, conn=self.conn)
        except OpslibError:
            self.status = ROLLED_BACK  # sql() rolled the connection back: every statement so far is undone
            raise

    def rollback(self) -> None:
        """Undo every statement of the block; the block then commits nothing."""
        if self.status == OPEN:
            self.conn.rollback()
            self.status = ROLLED_BACK

    def __repr__(self) -> str:
        return f"<opslib transaction: {self.status}>"


@contextlib.contextmanager
def transaction(*, conn: str | None = None) -> Iterator[Transaction]:
    """A :class:`Transaction` on a new connection to ``conn`` (a URL; default ``DATABASE_URL`` or the
    ``make run`` stack): committed when the block ends, rolled back when it raises or on ``tx.rollback()``."""
    if conn is not None and not isinstance(conn, str):
        raise OpslibError(
            f"transaction(conn=...) takes a PostgreSQL URL, got {type(conn).__name__}; "
            "on a connection of your own use `with conn.transaction():` and opslib.sql(..., conn=conn)"
        )
    connection = connect_postgres(
        conn or database_url(),
        autocommit=False,
        failure=lambda shown, exc: (
            f"cannot reach PostgreSQL at {shown} ({str(exc).strip()}); "
            "start the stack with `make run` or set DATABASE_URL"
        ),
    )
    tx = Transaction(connection)
    try:
        yield tx
        if tx.status == OPEN:
            try:
                connection.commit()
            except psycopg.Error as exc:
                raise OpslibError(f"the commit failed, nothing changed: {str(exc).strip()}") from None
            tx.status = COMMITTED
    except BaseException:
        if tx.status == OPEN:
            connection.rollback()
            tx.status = ROLLED_BACK
        raise
    finally:
        connection.close()
