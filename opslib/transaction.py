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

A commit is on record: one ``sql`` action in the operators' actions
(:func:`opslib.actions`) with who (``by``, the operating-system user unless
given), why (``reason=``) and each statement with the rows it returned or
changed (``detail``; ``entries`` is their sum). A rollback records nothing:
nothing changed.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pandas as pd
import psycopg

from opslib.actions import Action, record_action
from opslib.connection import connect_postgres, database_url, queue_keys, redis_session
from opslib.errors import OpslibError
from opslib.operator import Operator
from opslib.queries import sql

OPEN, COMMITTED, ROLLED_BACK = "open", "committed", "rolled back"
STATEMENT_CHARS = 1000
"""A statement is kept in the record up to this many characters (its parameters are not kept)."""


class Transaction:
    """Statements on one connection inside one transaction (make it with :func:`transaction`)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.status = OPEN
        self.statements: list[dict[str, Any]] = []

    def sql(self, query: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> pd.DataFrame:
        """The rows of ``query`` run in this transaction (as :func:`opslib.sql`; nothing commits yet)."""
        if self.status != OPEN:
            raise OpslibError(
                f"this transaction is {self.status}; run further statements in a new `with opslib.transaction()`"
            )
        try:
            rows = sql(query, params, conn=self.conn)
        except OpslibError:
            self.status = ROLLED_BACK  # sql() rolled the connection back: every statement so far is undone
            raise
        self.statements.append({"sql": " ".join(query.split())[:STATEMENT_CHARS], "rows": rows.attrs["rowcount"]})
        return rows

    def rollback(self) -> None:
        """Undo every statement of the block; the block then commits nothing."""
        if self.status == OPEN:
            self.conn.rollback()
            self.status = ROLLED_BACK

    def __repr__(self) -> str:
        return f"<opslib transaction: {self.status}>"


@contextlib.contextmanager
def transaction(
    *,
    reason: str | None = None,
    by: str | None = None,
    conn: str | None = None,
    client: Any = None,
    prefix: str | None = None,
) -> Iterator[Transaction]:
    """A :class:`Transaction` on a new connection to ``conn`` (a URL; default ``DATABASE_URL`` or the
    ``make run`` stack): committed when the block ends, rolled back when it raises or on ``tx.rollback()``.

    The commit is recorded as one ``sql`` action (``reason``, ``by``; the queue's Redis ``client`` /
    ``prefix`` as for every move), so the operators' actions hold the data fix beside the replays:

    >>> with opslib.transaction(reason="seat map 14-C -> 14C, INC-2214") as tx: ...
    """
    operator = Operator.acting("sql", by=by, reason=reason, required=False)
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
            record_commit(tx, operator, client, prefix)
    except BaseException:
        if tx.status == OPEN:
            connection.rollback()
            tx.status = ROLLED_BACK
        raise
    finally:
        connection.close()


def record_commit(tx: Transaction, operator: Operator, client: Any, prefix: str | None) -> None:
    """The ``sql`` action of a committed transaction: who, why, each statement and its rows."""
    rows = sum(max(statement["rows"], 0) for statement in tx.statements)
    done = Action("sql", operator, entries=rows, detail={"statements": tx.statements})
    try:
        with redis_session(client, prefix, "record the committed data fix") as (redis_client, keys):
            record_action(redis_client, keys, done)
    except OpslibError:  # no Redis here (a notebook with DATABASE_URL only): PostgreSQL alone takes the record
        try:
            record_action(None, queue_keys(prefix), done)
        except OpslibError as exc:  # committed all the same: say it, do not pretend it failed
            warnings.warn(str(exc), stacklevel=4)
