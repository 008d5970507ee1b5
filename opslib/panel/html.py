"""The HTML the dead-letter panel shows: counts, tables, the selected entry, questions and results.

Pure functions from frames to HTML strings. Every untrusted string (errors,
tracebacks, payload fields and their names, kinds, reasons) goes through
:func:`opslib.display.escape_html` or ``readable(...).to_html(escape=True)``; nothing from the
queue reaches the page as raw HTML, and control and bidi characters show as escapes. The CSV link
puts ``'`` before a cell a spreadsheet would read as a formula. Times are shown in the display time
zone (:func:`opslib.display.readable`), while the frames keep UTC.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

import pandas as pd

from opslib.attempts import attempt_rows
from opslib.display import MONOSPACE, display_tz, escape_html, local_time, plural, readable, spreadsheet_safe
from opslib.frames import DEAD_COLUMNS
from opslib.panel.filters import newest_first, replay_badge
from opslib.queries import QueueStats
from opslib.trace_links import trace_link_html
from worker.store.vocabulary import DISCARD_DISCARDED, REPLAY_MISSING, REPLAY_REPLAYED, STATUS_SUCCEEDED

PREVIEW_ROWS = 20
"""The preview shows this many entries (the action takes all of them)."""
TRACEBACK_CHARS = 20_000
"""The selected entry's traceback is shown up to this many characters (its last ones, where the error is)."""


TABLE_STYLE = (
    "<style>.opslib-table td,.opslib-table th{padding:2px 12px 2px 0;text-align:left;vertical-align:top}</style>"
)
BADGE_STYLE = "background:#fdebd0;color:#8a4b00;border-radius:8px;padding:0 6px;font-weight:normal"
PRE_STYLE = (
    f"white-space:pre-wrap;max-height:24em;overflow:auto;{MONOSPACE};font-size:12px;"
    "line-height:1.35;background:#f6f6f6;padding:6px"
)


def counts_html(stats: QueueStats) -> str:
    """The queue's counts in a line, each noun in the singular for one (``1 dead letter``, ``1 consumer``)."""
    dead = plural(stats.dead, "dead letter").split(" ", 1)
    parts = [
        f"<b>{dead[0]}</b> {dead[1]}",
        f"{stats.dead_evicted:,} evicted by the cap",
        f"{stats.pending:,} pending",
        f"{stats.delayed:,} delayed ({stats.delayed_due:,} due)",
        f"lag {stats.lag:,}",
        plural(len(stats.consumers), "consumer"),
    ]
    return "<p>" + " · ".join(parts) + "</p>"


def table_html(frame: pd.DataFrame) -> str:
    """A frame as an HTML table, every cell and header escaped, as :func:`~opslib.display.readable` shows it:
    times in the display zone, long text cut but signatures and ids whole."""
    table = readable(frame).to_html(escape=True, index=False, border=0, na_rep="", classes="opslib-table")
    return TABLE_STYLE + table


def times_note() -> str:
    return f'<p style="color:#666;font-size:small">times in {escape_html(display_tz())}</p>'


def groups_html(groups: pd.DataFrame, kind: str = "") -> str:
    """The failure groups of the entries the filters keep (``kind``: the kind selector's, for the sentence)."""
    if groups.empty:
        where = f" of {escape_html(kind)}" if kind else ""
        return f"<p>No dead letters{where} match the filters.</p>"
    return table_html(groups[["count", "kinds", "error_type", "signature", "last_seen"]]) + times_note()


def preview_html(taken: pd.DataFrame, *, selected: bool = False) -> str:
    """The entries an action would take: how many, and the newest :data:`PREVIEW_ROWS`, newest first (as the list)."""
    if taken.empty:
        return "<p>No dead letters match: nothing to replay or discard.</p>"
    fixed = ["dead_at", "kind", "job_id", "outbox_id", "attempts", "replays", "error"]
    payload = [name for name in taken.columns if name not in DEAD_COLUMNS]
    shown = newest_first(taken).head(PREVIEW_ROWS).reset_index()[["dead_id", *fixed, *payload]]
    more = f"; the newest {PREVIEW_ROWS} shown" if len(taken) > PREVIEW_ROWS else ""
    count, noun = plural(
        len(taken), "selected entry" if selected else "entry", "selected entries" if selected else "entries"
    ).split(" ", 1)
    head = f"<p>A replay would take <b>{count}</b> {noun} (newest first{more}):</p>"
    return head + table_html(shown) + times_note()


def page_html(first: int, last: int, total: int) -> str:
    """Where the entry list is: ``entries 201–400 of 450, newest first``."""
    if total == 0:
        return ""
    return f"<p>entries {first:,}–{last:,} of {total:,}, newest first</p>"


def csv_link_html(taken: pd.DataFrame, name: str) -> str:
    """A link that saves ``taken`` (every column, times in UTC) as ``name``: the data is in the link itself."""
    data = spreadsheet_safe(taken).to_csv(date_format="%Y-%m-%dT%H:%M:%S.%fZ").encode("utf-8")
    href = "data:text/csv;charset=utf-8;base64," + base64.b64encode(data).decode("ascii")
    label = f"Save {name} ({plural(len(taken), 'entry', 'entries')})"
    return f'<a download="{escape_html(name)}" href="{href}">{escape_html(label)}</a>'


def entry_html(dead_id: str | None, row: pd.Series | None) -> str:
    """The selected entry: what it is, its error, its trace (a link with ``OPSLIB_TRACE_URL``), its attempts,
    and its traceback with its line breaks (escaped)."""
    if dead_id is None or row is None:
        return "<p><i>Select an entry in the list to read its traceback.</i></p>"
    attempts = plural(int(row["attempts"]), "attempt") if pd.notna(row["attempts"]) else "attempts not known"
    parts = [dead_id, local_time(row["dead_at"]), row["kind"], row["reason"], attempts]
    about = " · ".join(escape_html(str(part)) for part in parts)
    badge = replay_badge(row)
    if badge:
        of = escape_html(str(row.get("replay_of") or ""))
        about += f' <span style="{BADGE_STYLE}">{escape_html(badge)}</span> failed again; it came from {of}'

    traceback = str(row["traceback"] or "")
    cut_note = ""
    if len(traceback) > TRACEBACK_CHARS:
        traceback, cut_note = "…" + traceback[-TRACEBACK_CHARS:], f" (its last {TRACEBACK_CHARS} characters)"
    body = (
        f'<pre style="{PRE_STYLE}">{escape_html(traceback)}</pre>'
        if traceback
        else "<p><i>This entry has no traceback.</i></p>"
    )
    trace_id = str(row.get("trace_id", "") or "")
    trace = f"<p>Trace {trace_link_html(trace_id)} (the request that enqueued it)</p>" if trace_id else ""
    return (
        f"<p><b>{about}</b></p><p><code>{escape_html(str(row['error']))}</code></p>{trace}"
        + attempts_html(row)
        + f"<p>Traceback{cut_note} · the whole entry: <code>opslib.show({escape_html(repr(dead_id))})</code></p>"
        + body
    )


def attempts_html(row: pd.Series) -> str:
    """The selected entry's attempts since it was enqueued or replayed (its ``attempt_log``), escaped."""
    attempts = int(row["attempts"]) if pd.notna(row.get("attempts")) else None
    rows = attempt_rows(str(row.get("attempt_log", "") or ""), attempts)
    if not rows:
        return ""
    items = "".join(f"<li>{escape_html(label)}: {escape_html(line)}</li>" for label, line in rows)
    return f"<p>Attempts (oldest first):</p><ol style='list-style:none;padding-left:1em'>{items}</ol>"


def result_html(done: pd.DataFrame) -> str:
    return _moved_html(done, "Replayed", REPLAY_REPLAYED)


def discard_result_html(done: pd.DataFrame) -> str:
    return _moved_html(done, "Discarded", DISCARD_DISCARDED)


def _moved_html(done: pd.DataFrame, verb: str, moved: str) -> str:
    """How many rows of a replay or discard frame have status ``moved``, how many were missing, and the batch."""
    counts = done["status"].value_counts()
    batch = escape_html(str(done.attrs.get("batch", "")))
    return (
        f"<p>{verb} <b>{counts.get(moved, 0)}</b> of {len(done)}"
        f" ({counts.get(REPLAY_MISSING, 0)} missing: taken by someone else since) · batch <code>{batch}</code></p>"
    )


def status_html(status: pd.DataFrame) -> str:
    counts = status["status"].value_counts()
    summary = ", ".join(f"{escape_html(str(name))}: <b>{count}</b>" for name, count in counts.items())
    unfinished = status[status["status"] != STATUS_SUCCEEDED]
    details = table_html(unfinished.drop(columns=["batch"]).head(PREVIEW_ROWS)) if len(unfinished) else ""
    return f"<p>Status: {summary}</p>{details}"


def error_html(exc: Exception) -> str:
    return f'<p style="color:#b00020">{escape_html(str(exc))}</p>'


def question_html(
    action: str, count: int, kind: str, signature: str, *, selected: bool, reason: str = "", setting: str = ""
) -> str:
    """The confirmation question of a replay or a discard (``reason``: the discard's; ``setting``: the
    fields a patched replay sets)."""
    what = plural(count, "selected dead letter" if selected else "dead letter")
    question = (
        f"<b>{action.capitalize()} {what}</b> of {escape_html(kind or 'every kind')}"
        f" with the error <code>{escape_html(signature)}</code>"
    )
    if reason:
        return f"{question} for good, because: <i>{escape_html(reason)}</i>?"
    if setting:
        return f"{question}, setting <code>{escape_html(setting)}</code>?"
    return f"{question}?"


SPARK_WIDTH, SPARK_HEIGHT = 180, 26


def polyline(values: Sequence[int], top: int, colour: str, width: int = SPARK_WIDTH, height: int = SPARK_HEIGHT) -> str:
    """One series as an SVG polyline over ``width`` x ``height`` (``top``: the value drawn at the top)."""
    step = width / max(len(values) - 1, 1)
    points = " ".join(f"{n * step:.1f},{height - 1 - value / top * (height - 2):.1f}" for n, value in enumerate(values))
    return f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}"/>'


def flow_html(per_minute: pd.DataFrame) -> str:
    """The last hour's flow in the header: a sparkline of jobs that succeeded and jobs that died per minute, and
    their sums.

    ``per_minute``: one row per minute (oldest first) with ``succeeded`` and
    ``dead`` (jobs, not attempts: a retried attempt is not counted), summed
    over the kinds. Numbers only reach the page (no text from the queue), as
    SVG drawn inline.
    """
    if per_minute.empty:
        return "<p>No flow counted in the last hour.</p>"
    counts = per_minute[["succeeded", "dead"]].fillna(0).astype(int)
    succeeded, failed = counts["succeeded"].tolist(), counts["dead"].tolist()
    top = max(1, *succeeded, *failed)
    label = f"jobs per minute over the last hour, at most {top:,} a minute"
    svg = (
        f'<svg width="{SPARK_WIDTH}" height="{SPARK_HEIGHT}" viewBox="0 0 {SPARK_WIDTH} {SPARK_HEIGHT}" '
        f'role="img" aria-label="{label}" style="vertical-align:middle">'
        f"<title>{label}</title>{polyline(succeeded, top, '#27ae60')}{polyline(failed, top, '#c0392b')}</svg>"
    )
    return (
        f'<p>last hour {svg} <span style="color:#27ae60">{sum(succeeded):,} succeeded</span> · '
        f'<span style="color:#c0392b">{sum(failed):,} died</span></p>'
    )
