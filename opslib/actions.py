"""What operators did: one record per action, and :func:`actions` to read them in order.

Every move an operator makes through opslib (its functions, ``python -m
opslib`` or the panel) calls :func:`record_action` once it is done: replay,
discard, pause, resume, throttle, run_now, cancel_delayed. The record goes
to PostgreSQL (``operator_actions``, beside the archive: see
:mod:`worker.archive.actions_table`); when PostgreSQL is away, or the
archive is off, it goes to Redis (``actions:log``) and the next
:func:`actions` that reaches PostgreSQL applies it (idempotent by its id).

``actions(since=None, kind=None)`` columns: at (UTC), by, action, kind,
entries (int), reason, batch, detail (JSON text); index 0..n-1, oldest first.

Example::

    >>> opslib.actions(since="2h")[["at", "by", "action", "kind", "reason"]]
                             at    by    action            kind                 reason
    0 2026-11-30 21:40:12+00:00   ana     pause  render_tickets  seat map fix, INC-2214
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pandas as pd
import psycopg
import redis

from opslib.checks import check_kind
from opslib.columns import COUNT, TEXT, TIME, typed_frame
from opslib.connection import archive_url, connect_postgres, pg_session, readable_archive_url, redis_session
from opslib.errors import OpslibError
from opslib.operator import Operator
from opslib.times import parse_since
from worker.archive.actions_table import ACTIONS_TABLE
from worker.store.keys import Keys
from worker.store.wire import text

ACTION_COLUMNS = {
    "at": TIME,
    "by": TEXT,
    "action": TEXT,
    "kind": TEXT,
    "entries": COUNT,
    "reason": TEXT,
    "batch": TEXT,
    "detail": TEXT,
}
FIELDS = ("id", "at", "by", "action", "kind", "entries", "reason", "batch", "detail")
INSERT = (
    f"INSERT INTO {ACTIONS_TABLE} (queue, id, at, by, action, kind, entries, reason, batch, detail) "
    "VALUES (%(queue)s, %(id)s, %(at)s, %(by)s, %(action)s, %(kind)s, %(entries)s, %(reason)s, %(batch)s, "
    "%(detail)s) ON CONFLICT DO NOTHING"
)


@dataclass(frozen=True)
class Action:
    """One move, as the operators' actions record it: what (``action``), who and why (``operator``), on
    which kind (``""``: mixed or none), how many entries it moved, its batch and any ``detail``."""

    action: str
    operator: Operator
    kind: str = ""
    entries: int = 0
    batch: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


def record_action(client: Any, keys: Keys, done: Action) -> None:
    """Write one action's record: to PostgreSQL, or to Redis's ``actions:log`` while PostgreSQL is away.

    Called after the move succeeded, so it never raises for PostgreSQL's sake. With no ``client`` (a data
    fix made while Redis is away), PostgreSQL is the only place: an :class:`OpslibError` says so when it fails.
    """
    record = {
        "id": f"{datetime.now(UTC):%Y%m%dT%H%M%S.%fZ}-{secrets.token_hex(4)}",
        "at": datetime.now(UTC).isoformat(),
        "by": done.operator.by,
        "action": done.action,
        "kind": done.kind,
        "entries": str(done.entries),
        "reason": done.operator.reason or "",
        "batch": done.batch,
        "detail": json.dumps(done.detail, sort_keys=True),
    }
    try:
        url = archive_url()
        if url is not None:
            with connect_postgres(url, autocommit=True, failure=lambda shown, exc: "") as conn:
                conn.execute(INSERT, {**record, "queue": keys.prefix})
            return
    except (OpslibError, psycopg.Error):
        pass
    if client is None:
        raise OpslibError(
            f"the {done.action} is done, but neither PostgreSQL (ARCHIVE_URL) nor Redis took its record; "
            "note it by hand in your incident log"
        )
    client.xadd(keys.actions_log, record)


def kind_of(ids: object, found: Iterable[str] = ()) -> str:
    """The one kind of the entries acted on, for the action's record: a frame's ``kind`` column
    (``dead_letters()``, ``delayed()``, a selection), else the kinds ``found`` on the entries;
    "" when they are mixed or unknown."""
    if isinstance(ids, pd.DataFrame) and "kind" in ids.columns:
        found = ids["kind"].dropna().astype(str)
    kinds = set(found) - {""}
    return kinds.pop() if len(kinds) == 1 else ""


def _apply_log(client: Any, keys: Keys, conn: psycopg.Connection[Any], log: list[Any]) -> None:
    """Insert the records waiting in Redis into ``operator_actions``, then delete them from the log."""
    if not log:
        return
    with conn.cursor() as cur:
        for _entry_id, fields in log:
            row = {name: text(fields.get(name.encode(), b"")) for name in FIELDS}
            cur.execute(INSERT, {**row, "entries": int(row["entries"] or 0), "queue": keys.prefix})
    if not conn.autocommit:
        conn.commit()
    client.xdel(keys.actions_log, *[entry_id for entry_id, _ in log])


def actions(
    since: object = None,
    kind: str | None = None,
    *,
    client: redis.Redis | None = None,
    prefix: str | None = None,
    conn: Any = None,
) -> pd.DataFrame:
    """The operators' actions, oldest first (columns in the module docstring).

    ``since``: a time or a duration back from now (``"2h"``); ``kind``: only
    actions on that kind. Records still waiting in Redis are applied to
    PostgreSQL first; with the archive off, or before any worker created the table, they are
    read from Redis.
    """
    start = parse_since(since)
    if kind is not None:
        check_kind(kind, [kind])
    with redis_session(client, prefix, "read the operators' actions") as (redis_client, keys):
        log = redis_client.xrange(keys.actions_log, "-", "+")
        url = archive_url() if conn is None else conn
        rows = [{name: text(fields.get(name.encode(), b"")) for name in FIELDS} for _id, fields in log]
        if url is not None:
            with pg_session(url, readable_archive_url, "ARCHIVE_URL") as pg:
                try:
                    _apply_log(redis_client, keys, pg, log)
                    rows = _select(pg, keys.prefix)
                except psycopg.errors.UndefinedTable:  # no worker has migrated yet: the log is all there is
                    pg.rollback()
    frame = actions_to_frame(rows)
    if start is not None:
        frame = frame[frame["at"] >= start]
    if kind is not None:
        frame = frame[frame["kind"] == kind]
    return frame.reset_index(drop=True)


def _select(conn: psycopg.Connection[Any], queue: str) -> list[dict[str, Any]]:
    query = (
        f"SELECT id, at, by, action, kind, entries, reason, batch, detail::text FROM {ACTIONS_TABLE} "
        "WHERE queue = %(queue)s ORDER BY at, id"
    )
    return [dict(zip(FIELDS, row, strict=True)) for row in conn.execute(query, {"queue": queue}).fetchall()]


def actions_to_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The frame of action records (PostgreSQL rows or Redis log fields), oldest first."""
    rows = sorted(rows, key=lambda row: (pd.Timestamp(row["at"]), row["id"]))
    columns = {
        "at": [pd.Timestamp(row["at"]) for row in rows],
        "by": [row["by"] for row in rows],
        "action": [row["action"] for row in rows],
        "kind": [row["kind"] for row in rows],
        "entries": [int(row["entries"] or 0) for row in rows],
        "reason": [row["reason"] for row in rows],
        "batch": [row["batch"] for row in rows],
        "detail": [row["detail"] if isinstance(row["detail"], str) else json.dumps(row["detail"]) for row in rows],
    }
    return typed_frame(columns, ACTION_COLUMNS)
