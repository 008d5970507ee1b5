"""How opslib's frames look to a person: times in a display time zone, wide text cut, tracebacks with line breaks.

The frames themselves never change: timestamps stay ``datetime64[ns, UTC]``
and every string stays whole, so a filter, a join or a copied value is
exact. What changes is what a person sees:

* Times are shown in the display time zone: :func:`set_display_tz`
  (``opslib.set_display_tz("Europe/Prague")``), else the ``OPSLIB_TZ``
  setting, else UTC; to the second, with the zone's abbreviation.
* Text wider than :data:`TEXT_CHARS` is cut with ``…``, except the values a
  person copies into a call (:data:`WHOLE`: signatures, ids, kinds, batches).
* A traceback shows its last :data:`TRACEBACK_LINES` lines (where the error
  is) with their line breaks; ``opslib.show(dead_id)`` shows it whole.
* Durations read ``1.2 s``, ``3 min 4 s``, ``2 h 5 min``, ``3 d 4 h``.
* A frame without rows can be shown as a sentence instead (:func:`frame_or`).

In Jupyter, :func:`install_formatter` (run by ``import opslib``) makes every
frame opslib returned (``frame.attrs["opslib"]``, kept by filters, ``head``,
``sort_values``...) render through :func:`frame_html` (and its plain text,
what nbval compares, through :func:`frame_text`); other frames render as
pandas renders them. The CLI prints :func:`frame_text`. Every value is
HTML-escaped (``DataFrame.to_html(escape=True)``, :func:`escape_html`).

Every text a person sees, in a table, a page or a terminal, goes through
:func:`worker.printable.printable` first: control, bidi and zero-width
characters show as escapes (``\\x1b``, ``\\u202e``), inert in a terminal and in
HTML alike. A CSV export (:func:`spreadsheet_safe`) puts ``'`` before a text
that a spreadsheet would read as a formula.
"""

from __future__ import annotations

import difflib
import html
import json
import zoneinfo
from typing import Any

import pandas as pd

from opslib.columns import MARK
from opslib.errors import OpslibError
from opslib.settings import OpslibSettings
from worker.errors import SettingsError
from worker.printable import printable

TEXT_CHARS = 120
"""Text cells are cut to this many characters for display."""
TRACEBACK_LINES = 6
"""A traceback cell shows this many of its last lines."""
WHOLE = frozenset(
    {
        "signature",
        "dead_id",
        "id",
        "job_id",
        "outbox_id",
        "example_id",
        "new_id",
        "new_dead_id",
        "replay_of",
        "replay_batch",
        "replay_new_id",
        "replay_dead_id",
        "batch",
        "kind",
        "kinds",
        "consumer",
        "request_id",
        "trace",
    }
)
"""Columns shown whole: a person copies these values into a call or a search."""
MULTILINE = frozenset({"traceback"})
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""A CSV cell starting with one of these is a formula to a spreadsheet (CSV injection): it gets a ``'``."""
STYLE = (
    "<style>.opslib-frame td{white-space:pre-wrap;vertical-align:top;text-align:left}"
    ".opslib-frame th{text-align:left}</style>"
)

MONOSPACE = "font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,'DejaVu Sans Mono',monospace"
"""Inline, on every ``<pre>`` holding a traceback: a renderer that drops ``<style>`` blocks or sets its own
font on ``pre`` (nbconvert's page, GitHub) still lines the ``^^^^`` markers up under the code."""

_chosen: str | None = None


def check_tz(name: object) -> str:
    """``name`` when it is a time zone this machine knows; an :class:`OpslibError` naming close ones otherwise."""
    if isinstance(name, str) and name:
        try:
            zoneinfo.ZoneInfo(name)
            return name
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            pass
    close = difflib.get_close_matches(str(name), sorted(zoneinfo.available_timezones()), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise OpslibError(f"{name!r} is not a time zone; {hint}give an IANA name such as 'Europe/Prague' or 'UTC'")


def set_display_tz(tz: str | None) -> str:
    """Show times in ``tz`` from now on (``None``: back to ``OPSLIB_TZ``); returns the zone in force.

    Only what is shown changes: the frames keep their timestamps in UTC.
    """
    global _chosen
    _chosen = None if tz is None else check_tz(tz)
    return display_tz()


def display_tz() -> str:
    """The zone times are shown in: :func:`set_display_tz`'s, else ``OPSLIB_TZ``, else UTC."""
    if _chosen is not None:
        return _chosen
    try:
        return OpslibSettings.from_env().display_tz
    except SettingsError as exc:
        raise OpslibError(f"invalid setting in the environment: {exc}") from None


def local_time(value: Any) -> str:
    """A timestamp as ``2026-11-30 22:14:03 CET`` in the display zone (``""`` for NaT or None)."""
    if value is None or value is pd.NaT or (isinstance(value, float) and pd.isna(value)):
        return ""
    stamp = pd.Timestamp(value)
    stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp
    return stamp.tz_convert(display_tz()).strftime("%Y-%m-%d %H:%M:%S %Z")


def as_typed(when: pd.Timestamp) -> str:
    """How a typed time was read, for an echo: ``15:46 CET (14:46 UTC)``, with the date unless it is today."""
    zone = display_tz()
    local, utc = when.tz_convert(zone), when.tz_convert("UTC")
    clock = "%H:%M" if not (local.second or local.microsecond) else "%H:%M:%S"
    if local.date() != pd.Timestamp.now(tz=zone).date():
        clock = "%Y-%m-%d " + clock
    read = f"{local.strftime(clock)} {local.tzname()}"
    return read if zone == "UTC" else f"{read} ({utc.strftime(clock)} UTC)"


def duration(value: Any) -> str:
    """A duration as ``850 ms``, ``1.2 s``, ``3 min 4 s``, ``2 h 5 min`` or ``3 d 4 h``."""
    if value is None or value is pd.NaT:
        return ""
    seconds = pd.Timedelta(value).total_seconds()
    sign, seconds = ("-" if seconds < 0 else ""), abs(seconds)
    if seconds < 1:
        return f"{sign}{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{sign}{seconds:.1f} s"
    whole = int(seconds)
    for unit, size, sub, sub_size in (("d", 86_400, "h", 3600), ("h", 3600, "min", 60), ("min", 60, "s", 1)):
        if whole >= size:
            return f"{sign}{whole // size} {unit} {whole % size // sub_size} {sub}"
    raise AssertionError("unreachable")


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``1 dead letter``, ``2 dead letters``, ``0 entries`` (``many``: the plural when it is not ``noun + "s"``)."""
    return f"{count:,} {noun if count == 1 else (many or noun + 's')}"


def cut(value: str, chars: int = TEXT_CHARS) -> str:
    """``value`` cut to ``chars`` characters, with ``…`` when something was left out."""
    return value if len(value) <= chars else value[: chars - 1] + "…"


def traceback_tail(value: str, lines: int = TRACEBACK_LINES) -> str:
    """The last ``lines`` lines of a traceback (where the error is), each cut to the text width."""
    rows = value.rstrip("\n").splitlines()
    shown = [cut(row) for row in rows[-lines:]]
    return "\n".join((["…"] if len(rows) > lines else []) + shown)


def escape_html(value: object) -> str:
    """``value`` as text for an HTML page: escaped, its control and bidi characters shown as escapes."""
    return html.escape(printable(str(value), lines=True))


def spreadsheet_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``frame`` for a CSV export: each text cell, index value (a kind's name in ``kinds()``) and
    column name (a payload field's) that starts like a formula (:data:`FORMULA_STARTS`) gets a leading ``'``,
    so a spreadsheet shows it as text."""
    shown = frame.copy()
    for name in shown.columns:
        if _is_text(shown[name].dtype):
            shown[name] = shown[name].map(_formula_safe)
    shown.index = _formula_safe_index(shown.index)
    shown.columns = _formula_safe_index(shown.columns)
    return shown


def _is_text(dtype: Any) -> bool:
    return bool(pd.api.types.is_object_dtype(dtype)) or isinstance(dtype, pd.StringDtype)


def _formula_safe(value: Any) -> Any:
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def _formula_safe_index(index: pd.Index) -> pd.Index:
    """``index`` (each level of a grouped one) with :func:`_formula_safe` applied to its text values."""
    if isinstance(index, pd.MultiIndex):
        levels = [_formula_safe_index(index.get_level_values(n)) for n in range(index.nlevels)]
        return pd.MultiIndex.from_arrays(levels, names=index.names)
    if _is_text(index.dtype):
        return pd.Index([_formula_safe(value) for value in index], dtype=index.dtype, name=index.name)
    return index


def readable(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``frame`` for a person to read: every cell text, as the module docstring describes."""
    shown = frame.copy()
    shown.index = readable_index(shown.index)
    for name in shown.columns:
        column = shown[name]
        key = name if isinstance(name, str) else ""
        if isinstance(column.dtype, pd.DatetimeTZDtype) or pd.api.types.is_datetime64_dtype(column.dtype):
            shown[name] = [local_time(t) for t in column]
        elif pd.api.types.is_timedelta64_dtype(column.dtype):
            shown[name] = [duration(t) for t in column]
        elif key in MULTILINE:
            shown[name] = [traceback_tail(v) if isinstance(v, str) else v for v in column]
        elif column.dtype == object and column.map(lambda v: isinstance(v, dict)).any():
            shown[name] = [cut(json.dumps(v, ensure_ascii=False)) if isinstance(v, dict) else v for v in column]
        elif key not in WHOLE and (column.dtype == "str" or column.dtype == object):
            shown[name] = [cut(v) if isinstance(v, str) else v for v in column]
        if shown[name].dtype == "str" or shown[name].dtype == object:
            shown[name] = [printable(v, lines=key in MULTILINE) if isinstance(v, str) else v for v in shown[name]]
    if not isinstance(shown.columns, pd.MultiIndex):  # a payload field's name is a column: it is shown too
        names = [printable(c) if isinstance(c, str) else c for c in shown.columns]
        if names != list(shown.columns):
            shown.columns = pd.Index(names, name=shown.columns.name)
    return shown


def readable_index(index: pd.Index) -> pd.Index:
    """``index`` with its times (a time index, or time levels of a grouped table's) in the display zone."""
    if isinstance(index, pd.MultiIndex):
        levels = [readable_index(index.get_level_values(n)) for n in range(index.nlevels)]
        return pd.MultiIndex.from_arrays(levels, names=index.names)
    if isinstance(index, pd.DatetimeIndex):
        return pd.Index([local_time(t) for t in index], name=index.name)
    if index.dtype == object or index.dtype == "str":
        return pd.Index([printable(v) if isinstance(v, str) else v for v in index], name=index.name)
    return index


def _index_has_times(index: pd.Index) -> bool:
    levels = [index.get_level_values(n) for n in range(index.nlevels)]
    return any(isinstance(level, pd.DatetimeIndex) for level in levels)


def has_times(frame: pd.DataFrame) -> bool:
    return _index_has_times(frame.index) or any(
        isinstance(dtype, pd.DatetimeTZDtype) or pd.api.types.is_datetime64_dtype(dtype) for dtype in frame.dtypes
    )


def frame_html(frame: pd.DataFrame, *, index: bool = True) -> str:
    """``frame`` as an escaped HTML table for a person (see the module docstring), long frames shortened."""
    rows = pd.get_option("display.max_rows") or len(frame)
    table = readable(frame).to_html(
        escape=True, na_rep="", border=0, classes="opslib-frame", index=index, max_rows=rows, show_dimensions=False
    )
    notes = []
    if len(frame) > rows:
        notes.append(f"{len(frame)} rows × {len(frame.columns)} columns")
    if has_times(frame):
        notes.append(f"times in {html.escape(display_tz())}")
    note = f'<p style="color:#666;font-size:small">{" · ".join(notes)}</p>' if notes else ""
    return STYLE + table + note


def frame_text(frame: pd.DataFrame, *, index: bool = True) -> str:
    """``frame`` as plain text for a terminal (the CLI): the same cells as :func:`frame_html`, one line each."""
    if frame.empty:
        return "(none)"
    shown = readable(frame)
    for name in shown.columns:
        if name in MULTILINE:
            shown[name] = [v.replace("\n", " ⏎ ") if isinstance(v, str) else v for v in shown[name]]
    text = shown.to_string(
        index=index, max_rows=pd.get_option("display.max_rows"), min_rows=pd.get_option("display.min_rows")
    )
    return text + (f"\n(times in {display_tz()})" if has_times(frame) else "")


def mark(frame: pd.DataFrame) -> pd.DataFrame:
    """Mark ``frame`` as opslib's, so that Jupyter renders it with :func:`frame_html`."""
    frame.attrs[MARK] = True
    return frame


def _html_of(frame: pd.DataFrame) -> str | None:
    if frame.attrs.get(MARK):
        return frame_html(frame)
    return frame._repr_html_()  # pandas' own rendering for every other frame


def _text_of(frame: pd.DataFrame, printer: Any, _cycle: bool) -> None:
    printer.text(frame_text(frame) if frame.attrs.get(MARK) else repr(frame))


def install_formatter() -> None:
    """In an IPython kernel, render opslib's frames with :func:`frame_html` (elsewhere: nothing to do)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        shell.display_formatter.formatters["text/html"].for_type(pd.DataFrame, _html_of)
        shell.display_formatter.formatters["text/plain"].for_type(pd.DataFrame, _text_of)


class Sentence:
    """A sentence shown where a table would have no rows (HTML in Jupyter, text elsewhere)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return printable(self.text, lines=True)

    def _repr_html_(self) -> str:
        return f"<p>{escape_html(self.text)}</p>"


def frame_or(frame: pd.DataFrame, sentence: str) -> pd.DataFrame | Sentence:
    """``frame``, or ``sentence`` when it has no rows: a notebook says "Nothing pending." instead of an empty table."""
    return Sentence(sentence) if frame.empty else frame
