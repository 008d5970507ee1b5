"""One dead letter, whole and readable: ``opslib.show(dead_id)`` and ``python -m opslib show ID``.

A row of ``dead_letters()`` squeezes an entry into one line. :func:`show`
reads the entry itself (from ``jobs:dead``, or from the archive once it has
left the stream) and lays it out for a person:

* what it is: when it died (in the display time zone, and in UTC), kind,
  job id, attempts, reason, worker, request id, trace, the W3C trace and
  span that created the job (from its ``traceparent``; the trace id is a
  link with ``OPSLIB_TRACE_URL``, :mod:`opslib.trace_links`), replay origin;
* why: the error whole, its signature whole (the exact string to copy into
  ``replay_kind(signature=...)`` or ``discard_kind``), and the traceback with
  its line breaks;
* its attempts since it was enqueued or replayed (``attempt_log``: the last
  10, each with its time in the display zone, duration, worker and error);
  the attempts before a replay are on the dead letter it was replayed from,
  the chain shown last; ``.attempts`` holds them as a frame;
* the payload's own fields, each cut at :data:`PAYLOAD_CHARS` for display
  (``.fields`` holds them whole); a field that is not UTF-8 text (a malformed
  entry) is shown with ``\\x`` escapes and said so;
* its life in the archive (PostgreSQL table ``dead_letters``): still dead,
  replayed (when, batch, the new entry, and whether it succeeded or failed
  again) or discarded (when, by whom, why). Without a reachable archive the
  view says why the archive was not read.

The result renders as HTML in Jupyter (every value escaped) and as plain text
anywhere else (``print``, ``repr``, the CLI); in both, control, bidi and
zero-width characters show as escapes (:mod:`worker.printable`), so a field
cannot forge a line of the view nor drive the terminal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import psycopg
import redis

from opslib.attempts import attempt_rows, attempts_frame
from opslib.checks import check_entry_id
from opslib.columns import entry_times
from opslib.connection import archive_url, partitions, redis_session
from opslib.display import MONOSPACE, cut, escape_html, local_time
from opslib.errors import OpslibError
from opslib.moves.archived import apply_pending_log
from opslib.signatures import error_type, signature
from opslib.trace_links import trace_link_html, trace_url
from worker.archive.table import TABLE, fields_from_json
from worker.printable import printable
from worker.store import attempt_log
from worker.store.trace_context import TRACE_FIELDS, TRACEPARENT, trace_ids

PAYLOAD_CHARS = 500
"""A payload field is shown up to this many characters (``.fields`` keeps it whole)."""

#: The wire fields shown under "what", in this order (the error fields come under "why").
ABOUT_FIELDS = (
    "kind",
    "job_id",
    "outbox_id",
    "attempts",
    "reason",
    "failed_at",
    "worker",
    "request_id",
    "trace",
    "replay_of",
    "replay_batch",
    "replays",
)
#: How far back ``show`` follows a chain of replays that failed again.
CHAIN_LIMIT = 10
WHY_FIELDS = ("error", "traceback")
#: Shown as the trace_id and span_id they hold, not as payload.
TRACE_WIRE = frozenset(TRACE_FIELDS)
ATTEMPTS_TITLE = f"Attempts (oldest first, the last {attempt_log.KEPT_ATTEMPTS} kept; since enqueued or replayed)"
#: The archive's columns on an entry's life after death, in the order shown.
LIFE_COLUMNS = (
    "status",
    "archived_at",
    "replayed_at",
    "replay_batch",
    "replay_new_id",
    "replay_outcome",
    "replay_dead_id",
    "discarded_at",
    "discarded_by",
    "discard_reason",
)
IN_STREAM, ARCHIVE_ONLY = "jobs:dead", "the archive only"


@dataclass(frozen=True)
class DeadLetter:
    """One dead entry: ``raw`` (its fields as bytes, in order), ``fields`` (as text), ``life`` (the archive's row).

    ``where`` is ``jobs:dead`` or ``the archive only`` (replayed or discarded
    since); ``archive_note`` says why ``life`` is empty when it is.
    """

    dead_id: str
    where: str
    raw: Sequence[tuple[bytes, bytes]]
    life: dict[str, Any] = field(default_factory=dict)
    archive_note: str = ""
    chain: list[tuple[str, str]] = field(default_factory=list)
    """When the job came from a replay: each earlier dead letter back to the first failure (dead id, error)."""

    @property
    def fields(self) -> dict[str, str]:
        """Every field as text (bytes that are not UTF-8 as ``\\x`` escapes), whole."""
        return {_text(name): _text(value) for name, value in self.raw}

    @property
    def binary(self) -> set[str]:
        """The fields whose name or value is not UTF-8 text."""
        return {_text(name) for name, value in self.raw if not (_is_text(name) and _is_text(value))}

    @property
    def dead_at(self) -> pd.Timestamp:
        return entry_times([self.dead_id])[0]

    @property
    def error(self) -> str:
        return self.fields.get("error", "")

    @property
    def signature(self) -> str:
        return signature(self.error)

    @property
    def attempts(self) -> pd.DataFrame:
        """Its attempts since it was enqueued or replayed (``attempt_log``), oldest first: attempt (int64),
        at (datetime64[ns, UTC]), duration (timedelta64[ns]), worker, error (str)."""
        return attempts_frame(self.fields.get(attempt_log.FIELD, ""), self._attempts_made())

    def _attempts_made(self) -> int | None:
        made = self.fields.get("attempts", "")
        return int(made) if made.isascii() and made.isdigit() else None

    @property
    def trace_ids(self) -> tuple[str, str]:
        """(trace id, span id) of the span that created the job, from its ``traceparent``; ("", "") without."""
        return trace_ids(self.fields.get(TRACEPARENT))

    def sections(self) -> list[tuple[str, list[tuple[str, str]]]]:
        """What the views show: (title, [(label, value), ...]) with display cuts applied, traceback apart."""
        fields = self.fields
        about = [("dead_at", f"{local_time(self.dead_at)} ({self.dead_at.isoformat()})")]
        about += [(name, fields[name]) for name in ABOUT_FIELDS if fields.get(name)]
        trace_id, span_id = self.trace_ids
        if trace_id:
            about += [("trace_id", trace_id), ("span_id", span_id)]
            url = trace_url(trace_id)
            about += [("trace_url", url)] if url else []
        why = [
            ("error", self.error),
            ("error_type", error_type(self.error)),
            ("signature", self.signature),
        ]
        known = {*ABOUT_FIELDS, *WHY_FIELDS, *TRACE_WIRE, attempt_log.FIELD}
        payload = []
        for name, value in fields.items():
            if name in known:
                continue
            shown = value if len(value) <= PAYLOAD_CHARS else cut(value, PAYLOAD_CHARS)
            if len(value) > PAYLOAD_CHARS:
                shown += f" ({len(value) - PAYLOAD_CHARS + 1} more characters: .fields[{name!r}] holds it whole)"
            if name in self.binary:
                shown += "  (not UTF-8 text: bytes shown as \\x escapes; .raw holds them as they were)"
            payload.append((name, shown))
        life = [(name, _life_value(self.life[name])) for name in LIFE_COLUMNS if self.life.get(name) is not None]
        if not life:
            life = [("archive", self.archive_note or "no row")]
        tried = attempt_rows(fields.get(attempt_log.FIELD, ""), self._attempts_made())
        views = [
            ("What", about),
            ("Why", why),
            *([(ATTEMPTS_TITLE, tried)] if tried else []),
            ("Payload", payload or [("", "(no payload fields)")]),
            ("Archive", life),
        ]
        if self.chain:
            views.append(("Failed before (replayed, back to the first failure)", self.chain))
        return views

    def _title(self) -> str:
        kind = self.fields.get("kind") or "(no kind)"
        reason = self.fields.get("reason") or "(no reason)"
        return f"Dead letter {self.dead_id} · {kind} · {reason} · in {self.where}"

    def __str__(self) -> str:
        lines = [printable(self._title())]
        for title, rows in self.sections():
            lines.append(f"\n{title}:")
            rows = [(printable(label), printable(value)) for label, value in rows]  # a newline too: one line each
            width = max((len(label) for label, _ in rows), default=0)
            lines += [f"  {label:<{width}}  {value}".rstrip() for label, value in rows]
        traceback = printable(self.fields.get("traceback", ""), lines=True)
        lines.append("\nTraceback:" if traceback else "\nTraceback: (none)")
        lines += [f"  {line}" for line in traceback.rstrip("\n").split("\n")] if traceback else []
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        esc = escape_html
        parts = [
            '<div class="opslib-show">',
            f"<h4>{esc(self._title())}</h4>",
        ]
        for title, rows in self.sections():
            parts.append(f"<p><b>{esc(title)}</b></p><table class='opslib-frame'>")
            for label, value in rows:
                copyable = label == "signature"
                cell = f'<code style="user-select:all">{esc(value)}</code>' if copyable else esc(value)
                if label == "trace_id":
                    cell = trace_link_html(value)
                elif label == "trace_url":
                    continue
                parts.append(
                    f"<tr><th style='text-align:left;vertical-align:top'>{esc(label)}</th>"
                    f"<td style='white-space:pre-wrap;text-align:left'>{cell}</td></tr>"
                )
            parts.append("</table>")
        traceback = self.fields.get("traceback", "")
        parts.append("<p><b>Traceback</b></p>")
        pre = f'<pre style="white-space:pre-wrap;{MONOSPACE}">{esc(traceback)}</pre>'
        parts.append(pre if traceback else "<p>(none)</p>")
        parts.append("</div>")
        return "".join(parts)


def _is_text(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _text(value: bytes) -> str:
    return value.decode("utf-8", "backslashreplace")


def _life_value(value: Any) -> str:
    if isinstance(value, pd.Timestamp) or hasattr(value, "tzinfo"):
        stamp = pd.Timestamp(value)
        return f"{local_time(stamp)} ({stamp.tz_convert('UTC').isoformat()})"
    return str(value)


def lineage(replay_of: str, queue: str, conn: Any = None) -> list[tuple[str, str]]:
    """The dead letters a job died as before it was replayed, newest first, back to the first failure
    (dead id, error), from the archive; at most :data:`CHAIN_LIMIT`."""
    chain: list[tuple[str, str]] = []
    while replay_of and len(chain) < CHAIN_LIMIT:
        row, _note = archive_row(replay_of, queue, conn)
        if row.get("fields") is None:
            chain.append((replay_of, "(not in the archive)"))
            break
        fields = {_text(name): _text(value) for name, value in fields_from_json(row["fields"])}
        chain.append((replay_of, fields.get("error", "")))
        replay_of = fields.get("replay_of", "")
    return chain


def archive_row(dead_id: str, queue: str, conn: Any = None) -> tuple[dict[str, Any], str]:
    """The archive's row of ``dead_id`` in ``queue`` (its life columns and ``fields``), or ``{}`` and why not.

    ``conn`` is a psycopg connection, a URL, or None for the archive the
    workers use (``ARCHIVE_URL``, else ``DATABASE_URL`` / the ``make run``
    stack). An archive that cannot be read is not an error here: the entry is
    shown from Redis with the reason.
    """
    own = not isinstance(conn, psycopg.Connection)
    try:
        url: str = (conn or archive_url() or "") if own else ""
    except OpslibError as exc:
        return {}, f"not read: {exc}"
    if own and not url:
        return {}, "not read: the archive is off (ARCHIVE_URL=off)"
    query = (
        f"SELECT {', '.join(LIFE_COLUMNS)}, fields FROM {TABLE} "
        "WHERE queue = %s AND dead_id = %s ORDER BY partition LIMIT 1"
    )
    try:
        connection = psycopg.connect(url, connect_timeout=5, autocommit=True) if own else conn
    except psycopg.OperationalError as exc:
        return {}, f"not read: cannot reach PostgreSQL ({str(exc).strip()})"
    try:
        with connection.cursor(row_factory=psycopg.rows.dict_row) as cursor:
            cursor.execute(query, (queue, dead_id))
            row = cursor.fetchone()
    except psycopg.errors.UndefinedTable:
        if not own:
            connection.rollback()
        return {}, f"no {TABLE} table in this database (the archive is off, or `python -m worker migrate` never ran)"
    except psycopg.Error as exc:
        if not own:
            connection.rollback()
        return {}, f"not read: {str(exc).strip()}"
    finally:
        if own:
            connection.close()
    if row is None:
        return {}, "no row yet (the archiver writes each dead entry within seconds)"
    return dict(row), ""


def show(
    dead_id: str,
    *,
    archive: bool = True,
    client: redis.Redis | None = None,
    prefix: str | None = None,
    conn: Any = None,
) -> DeadLetter:
    """One dead letter, whole: from ``jobs:dead``, or from the archive when it left the stream.

    ``archive=False`` skips PostgreSQL. Raises :class:`OpslibError` when
    neither holds the id.
    """
    entry_id = check_entry_id(dead_id)
    with redis_session(client, prefix, "read a dead letter") as (redis_client, keys):
        found = []
        for part in partitions(redis_client, keys):
            found = redis_client.xrange(part.dead, entry_id, entry_id)
            if found:
                break
        queue = keys.prefix
    if archive:
        apply_pending_log(conn, client=client, prefix=prefix)  # a discard or replay just made is in the row
    row, note = archive_row(entry_id, queue, conn) if archive else ({}, "not read (archive=False)")
    stored = row.pop("fields", None)
    if found:
        raw = [(_bytes(name), _bytes(value)) for name, value in found[0][1].items()]
        letter = DeadLetter(entry_id, IN_STREAM, raw, row, note)
    elif stored is not None:
        letter = DeadLetter(entry_id, ARCHIVE_ONLY, fields_from_json(stored), row, note)
    else:
        letter = None
    if letter is not None:
        if archive:
            letter.chain.extend(lineage(letter.fields.get("replay_of", ""), queue, conn))
        return letter
    where = "jobs:dead" + ("" if not archive else " nor the archive" + (f" ({note})" if note else ""))
    raise OpslibError(
        f"no dead letter {entry_id} in {where}; ids come from the index of dead_letters() "
        "(or the dead_id column of archive())"
    )


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()
