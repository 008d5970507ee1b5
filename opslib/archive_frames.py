"""Pure converters from rows of the archive (PostgreSQL ``dead_letters``) to DataFrames (no I/O).

:mod:`opslib.archive` runs the queries; the functions here turn their rows
into the frames of ``archive()`` and ``history()``, with fixed columns and
dtypes whether a query found a million rows or none, and are tested without
a database. The period arithmetic of ``history()`` lives here too, so that
the periods PostgreSQL computes (``date_bin``) and the ones filled in here
line up.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import pandas as pd

from opslib.columns import COUNT, TEXT, TIME, typed_frame
from opslib.errors import OpslibError
from opslib.frames import DEAD_COLUMNS, add_payload_columns, whole_number
from worker.archive.table import COLUMN_NAMES, COLUMNS
from worker.store.queues import queue_of_prefix

#: Columns of the table that ``archive()`` does not show as such: the queue is the query's filter, the wire
#: ``fields`` become ``job_id``, ``outbox_id`` and the payload's columns, ``dead_id`` is the index.
NOT_SHOWN = frozenset({"queue", "fields", "dead_id", "discard_batch"})
_DTYPES = {"text": TEXT, "timestamptz": TIME, "integer": COUNT, "smallint": COUNT}

#: ``archive()``: index ``dead_id`` (str), then these, then the payload's own fields (str, NaN where absent).
#: The first columns are ``dead_letters()``'s, except that its ``replay_batch`` (the batch of the replay this
#: job came from) is named ``replay_of_batch`` here: ``replay_batch`` is the batch that replayed this entry.
#: Then the table's columns written after death (``worker.archive.table.COLUMNS``), in table order.
ARCHIVE_COLUMNS = {
    **{("replay_of_batch" if name == "replay_batch" else name): dtype for name, dtype in DEAD_COLUMNS.items()},
    **{
        column.name: _DTYPES[column.sql.split()[0]]
        for column in COLUMNS
        if column.writer != "entry" and column.name not in NOT_SHOWN
    },
}

#: Columns read from the wire fields, and the field each comes from; the others from the table's columns.
_FROM_FIELDS = {
    "job_id": "job_id",
    "outbox_id": "outbox_id",
    "replay_of": "replay_of",
    "replay_of_batch": "replay_batch",
    "attempt_log": "attempt_log",
}

#: The table's columns that ``archive()`` selects (read by name in :func:`archive_to_frame`).
ARCHIVE_SELECT = tuple(
    name
    for name in COLUMN_NAMES
    if name in {"dead_id", "fields"} or (name in ARCHIVE_COLUMNS and name not in _FROM_FIELDS)
)


def wire_text(value: str | Mapping[str, str]) -> str:
    """A name or value of the ``fields`` column as text (a ``{"b64": ...}`` one decoded, bad bytes escaped)."""
    if isinstance(value, str):
        return value
    return base64.b64decode(value["b64"]).decode("utf-8", "backslashreplace")


def wire_fields(stored: Iterable[Sequence[Any]]) -> dict[str, str]:
    """The ``fields`` column's ``[[name, value], ...]`` as a dict of text (the common all-text case at C speed)."""
    try:
        entry: dict[Any, Any] = dict(stored)  # type: ignore[arg-type]
    except TypeError:  # a {"b64": ...} name is unhashable
        entry = {}
    if entry and all(type(value) is str for value in entry.values()):
        return entry
    return {wire_text(name): wire_text(value) for name, value in stored}


def archive_to_frame(rows: Iterable[Sequence[Any]]) -> pd.DataFrame:
    """The ``archive()`` frame of rows holding the columns of :data:`ARCHIVE_SELECT`, in that order.

    ``fields`` is the stored ``[[name, value], ...]`` list (see
    ``worker.archive.table.fields_to_json``). NULL text is ``""``, NULL
    ``attempts`` 0, NULL times NaT. A payload field named like a column is
    shown as ``field:<name>``, as in ``dead_letters()``.
    """
    transposed = list(zip(*rows, strict=True)) or [()] * len(ARCHIVE_SELECT)
    table: dict[str, Sequence[Any]] = dict(zip(ARCHIVE_SELECT, transposed, strict=True))
    ids = table["dead_id"]
    fields = [wire_fields(stored) for stored in table["fields"]]
    columns: dict[str, Sequence[Any]] = {}
    for name, dtype in ARCHIVE_COLUMNS.items():
        if name in _FROM_FIELDS:
            columns[name] = [entry.get(_FROM_FIELDS[name], "") for entry in fields]
        elif name == "queue":  # the archive's queue column holds the queue's key prefix
            columns[name] = [queue_of_prefix(value) for value in table[name]]
        elif name == "attempts":
            columns[name] = [0 if value is None else value for value in table[name]]
        elif name == "replays":
            columns[name] = [whole_number(entry.get("replays", "")) for entry in fields]
        elif dtype == TEXT:
            columns[name] = ["" if value is None else value for value in table[name]]
        else:
            columns[name] = table[name]
    add_payload_columns(columns, fields, ARCHIVE_COLUMNS)
    return typed_frame(columns, ARCHIVE_COLUMNS, index=pd.Index(ids, dtype=TEXT, name="dead_id"))


#: ``history()``: one row per period and kind, oldest period first, kinds in name order.
HISTORY_COLUMNS = {
    "period": TIME,
    "kind": TEXT,
    "died": COUNT,
    "replayed": COUNT,
    "discarded": COUNT,
    "succeeded_after_replay": COUNT,
}
HISTORY_MEASURES = ("died", "replayed", "discarded", "succeeded_after_replay")

#: Where periods start counting: a Monday at midnight UTC, so "1h" periods start on the hour, "1D" at
#: midnight UTC and "7D" on Mondays. PostgreSQL's ``date_bin`` gets the same origin.
PERIOD_ORIGIN = pd.Timestamp("2001-01-01", tz="UTC")
#: More periods than this (times the kinds) in one history is a mistake (e.g. freq="1s" over a month).
MAX_PERIODS = 100_000
FREQ_EXAMPLES = "'15min', '1h', '6h', '1D', '7D' or a pd.Timedelta"


def parse_freq(freq: object) -> pd.Timedelta:
    """The length of a history period: a fixed duration of at least one second."""
    try:
        if isinstance(freq, str | timedelta | pd.Timedelta):
            stride = pd.Timedelta(freq)
        else:
            raise ValueError
    except ValueError:
        stride = pd.NaT
    if stride is pd.NaT or stride < pd.Timedelta(seconds=1) or stride % pd.Timedelta(seconds=1):
        raise OpslibError(
            f"freq={freq!r} is not a period length; give a whole number of seconds or more, such as "
            f"{FREQ_EXAMPLES} (months and years vary in length: use days)"
        )
    return stride


def freq_label(stride: pd.Timedelta) -> str:
    """A period length as people write it: ``"1D"``, ``"6h"``, ``"15min"``, ``"90s"``."""
    for unit, name in ((pd.Timedelta("1D"), "D"), (pd.Timedelta("1h"), "h"), (pd.Timedelta("1min"), "min")):
        if not stride % unit:
            return f"{stride // unit}{name}"
    return f"{int(stride.total_seconds())}s"


def period_of(when: pd.Timestamp, stride: pd.Timedelta) -> pd.Timestamp:
    """The start of the period of length ``stride`` holding ``when`` (as ``date_bin`` with :data:`PERIOD_ORIGIN`)."""
    return PERIOD_ORIGIN + ((when - PERIOD_ORIGIN) // stride) * stride


def busy_periods(frame: pd.DataFrame, measures: Sequence[str]) -> pd.DataFrame:
    """The rows of a per-period frame (``throughput()``, ``history()``) where one of ``measures`` is above 0."""
    return frame[frame[list(measures)].fillna(0).gt(0).any(axis=1)]


def history_to_frame(
    rows: Iterable[Sequence[Any]],
    stride: pd.Timedelta,
    *,
    start: pd.Timestamp | None = None,
    end: pd.Timestamp | None = None,
    kinds: Iterable[str] = (),
) -> pd.DataFrame:
    """The ``history()`` frame of ``(period, kind, died, replayed, discarded, succeeded_after_replay)`` rows.

    Each kind of ``rows`` gets a row for every period, zeros when it had no event, from the
    period of ``start`` (else the first with an event) to the period of the
    last instant before ``end`` (else the last with an event). ``kinds``
    are kinds to show even without events (the one asked for). The frame's
    ``attrs["freq"]`` holds ``stride`` and ``attrs["window"]`` the span of
    its periods (ending at now when the last one is under way), for
    :func:`opslib.plot_history`.
    """
    found = pd.DataFrame.from_records(list(rows), columns=list(HISTORY_COLUMNS))
    found["period"] = pd.to_datetime(found["period"], utc=True)
    every_kind = sorted(set(found["kind"]) | set(kinds))
    first = period_of(start, stride) if start is not None else found["period"].min()
    last = period_of(end - pd.Timedelta(microseconds=1), stride) if end is not None else found["period"].max()
    if not found.empty:
        first, last = min(first, found["period"].min()), max(last, found["period"].max())
    if not every_kind or pd.isna(first) or pd.isna(last) or last < first:
        frame = typed_frame({}, HISTORY_COLUMNS)
    else:
        periods = (last - first) // stride + 1
        if periods * len(every_kind) > MAX_PERIODS:
            raise OpslibError(
                f"a history of {periods:,} periods of {stride} for {len(every_kind)} kinds is too long to show; "
                f"choose a longer freq ({FREQ_EXAMPLES}) or a later since="
            )
        grid = pd.MultiIndex.from_product(
            [pd.date_range(first, last, freq=stride), every_kind], names=["period", "kind"]
        )
        filled = found.set_index(["period", "kind"]).reindex(grid, fill_value=0).reset_index()
        frame = typed_frame({name: filled[name].tolist() for name in HISTORY_COLUMNS}, HISTORY_COLUMNS)
    frame.attrs["freq"] = stride
    if not frame.empty:
        frame.attrs["window"] = (first, min(last + stride, pd.Timestamp.now(tz="UTC")))
    return frame
