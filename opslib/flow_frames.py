"""The pure converter behind :func:`opslib.throughput`: flow records as read from Redis to the frame (no I/O).

Columns (fixed dtypes, also when empty):

============  ========================  ==============================================
column        dtype                     holds
============  ========================  ==============================================
period        datetime64[ns, UTC]       the period's start (``freq`` long)
queue         str                       the named queue the jobs came from (``default``, ``bulk``...)
kind          str                       the job kind
succeeded     Int64                     jobs whose handler returned
retried       Int64                     failed attempts put back for a retry (attempts, not jobs)
dead          Int64                     jobs dead-lettered (whether or not they ran): "failed"
wait_p50_s    float64                   median wait from enqueue (or due time) to start
wait_p95_s    float64                   95th percentile of the wait
run_p50_s     float64                   median run time of the attempts
run_p95_s     float64                   95th percentile of the run time
============  ========================  ==============================================

Counts are 0 where nothing happened and missing (``pd.NA``: ``isna()`` is
true, sums skip it) in periods older than the counters are kept
(``FLOW_RETENTION``): "not kept" is not "nothing happened". The percentiles
come from log-spaced buckets (each bound twice the last), interpolated inside
the bucket: read them as "about"; NaN when nothing started (or ran) in the
period. ``attrs``: ``freq`` (the period), ``window`` (the ``(start, end)``
asked for, ``end`` at most now) and ``kept_from`` (the first period kept).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from opslib.archive_frames import FREQ_EXAMPLES, MAX_PERIODS, freq_label, parse_freq, period_of
from opslib.columns import TEXT, TIME, typed_frame
from opslib.display import plural
from opslib.errors import OpslibError
from worker.store.flow import BOUNDS_S, BUCKETS, COUNTS, RUN, WAIT, bucket_field

FLOAT = "float64"
KEPT_COUNT = "Int64"
"""A count that is missing (``pd.NA``) where the counters were not kept."""
THROUGHPUT_COLUMNS = {
    "period": TIME,
    "queue": TEXT,
    "kind": TEXT,
    "succeeded": KEPT_COUNT,
    "retried": KEPT_COUNT,
    "dead": KEPT_COUNT,
    "wait_p50_s": FLOAT,
    "wait_p95_s": FLOAT,
    "run_p50_s": FLOAT,
    "run_p95_s": FLOAT,
}
#: One raw record: the start of a minute or hour (epoch seconds), its named queue, its kind, and its hash's
#: fields (as read: bytes, or text and numbers).
RawFlow = tuple[int, str, str, Mapping[Any, Any]]

_FIELD_SLOTS: dict[str, int] = {name: i for i, name in enumerate(COUNTS)} | {
    bucket_field(measure, i): len(COUNTS) + m * BUCKETS + i
    for m, measure in enumerate((WAIT, RUN))
    for i in range(BUCKETS)
}
#: Where each hash field goes in a record's row of numbers, by its name as text and as Redis returns it.
_SLOTS: dict[str | bytes, int] = {name.encode(): slot for name, slot in _FIELD_SLOTS.items()}
_SLOTS.update(_FIELD_SLOTS)
_WIDTH = len(COUNTS) + 2 * BUCKETS
_HIGHS = np.array([*BOUNDS_S, BOUNDS_S[-1] * 2])
_LOWS = np.array([BOUNDS_S[0] / 2, *BOUNDS_S])


def percentiles(buckets: np.ndarray, q: float) -> np.ndarray:
    """The ``q``-quantile of each row of bucket counts (NaN for a row without any), interpolated
    geometrically inside the bucket where the count crosses ``q`` (the bounds grow by a factor)."""
    total = buckets.sum(axis=1)
    rank = q * total
    cumulative = buckets.cumsum(axis=1)
    index = np.argmax(cumulative >= rank[:, None], axis=1)
    rows = np.arange(len(buckets))
    count = buckets[rows, index]
    below = cumulative[rows, index] - count
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(count > 0, (rank - below) / count, 0.0)
        low, high = _LOWS[index], _HIGHS[index]
        return np.where(total > 0, low * (high / low) ** share, np.nan)


def grid_spans(
    stride: pd.Timedelta, start: pd.Timestamp, end: pd.Timestamp, cut: pd.Timestamp | None
) -> list[tuple[pd.Timestamp, pd.Timestamp, pd.Timedelta]]:
    """The ``(first, last, step)`` runs of periods of the window: ``stride`` apart, but an hour apart before
    ``cut`` (where only hours are kept) when ``stride`` is shorter. Arithmetic only: nothing the size of
    the window is made here."""
    hour = pd.Timedelta(hours=1)
    last_instant = end - pd.Timedelta(microseconds=1)
    first, last = period_of(start, stride), period_of(last_instant, stride)
    if last < first:
        return []
    if cut is None or stride >= hour or cut <= first:
        return [(first, last, stride)]
    after_cut = first + -((first - cut) // stride) * stride  # the first period of the grid at or after cut
    hours = (period_of(start, hour), min(cut - hour, period_of(last_instant, hour)), hour)
    return [hours, (after_cut, last, stride)]


def periods_grid(
    stride: pd.Timedelta, start: pd.Timestamp, end: pd.Timestamp, cut: pd.Timestamp | None
) -> pd.DatetimeIndex:
    """The periods of :func:`grid_spans`, as an index (check their number first: :func:`check_periods`)."""
    grid = pd.DatetimeIndex([], tz="UTC")
    for first, last, step in grid_spans(stride, start, end, cut):
        grid = grid.append(pd.date_range(first, last, freq=step))
    return grid


def period_count(spans: list[tuple[pd.Timestamp, pd.Timestamp, pd.Timedelta]]) -> int:
    return sum(max(0, (last - first) // step + 1) for first, last, step in spans)


def check_periods(periods: int, kinds: int, stride: pd.Timedelta) -> None:
    """An :class:`OpslibError` when ``periods`` times ``kinds`` is more rows than a frame should hold (before
    any read, and before the periods are made)."""
    if periods * kinds > MAX_PERIODS:
        raise OpslibError(
            f"a throughput of {periods:,} periods of {freq_label(stride)} for {plural(kinds, 'kind')} is too long to "
            "show; "
            f"choose a longer freq ({FREQ_EXAMPLES}), a later since= or one kind"
        )


def record_values(records: Sequence[RawFlow]) -> np.ndarray:
    """One row of numbers per record: the counts, then the wait buckets, then the run buckets."""
    values = np.zeros((len(records), _WIDTH), dtype=np.int64)
    for row, (*_, fields) in enumerate(records):
        for name, n in fields.items():
            slot = _SLOTS.get(name)
            if slot is not None:
                values[row, slot] = int(n)
    return values


def flow_to_frame(
    raw: Iterable[RawFlow],
    freq: object = "1min",
    *,
    start: pd.Timestamp,
    end: pd.Timestamp,
    cut: pd.Timestamp | None = None,
    kinds: Sequence[tuple[str, str]] = (),
    kept_from: pd.Timestamp | None = None,
) -> pd.DataFrame:
    """The ``throughput()`` frame of ``raw`` records (minute or hour hashes as read), one row per period of
    the window ``[start, end)`` and ``(queue, kind)`` (zeros when nothing happened). ``cut``: before it the
    records are hours. ``kinds``: ``(queue, kind)`` pairs to show even without a record. ``kept_from``: periods
    starting before it are past the counters' retention, their counts missing ("not kept", not 0)."""
    stride = parse_freq(freq)
    records = list(raw)
    every_kind = sorted({(queue, kind) for _, queue, kind, _ in records} | set(kinds))
    spans = grid_spans(stride, start, end, cut)
    check_periods(period_count(spans), len(every_kind), stride)
    grid = periods_grid(stride, start, end, cut)
    frame = typed_frame({}, THROUGHPUT_COLUMNS)
    if every_kind and not grid.empty:
        frame = grid_frame(records, grid, every_kind, period_of(end - pd.Timedelta(microseconds=1), stride) + stride)
        if kept_from is not None:
            gone = frame["period"] < kept_from
            frame.loc[gone, list(COUNTS)] = pd.NA
            frame.loc[gone, ["wait_p50_s", "wait_p95_s", "run_p50_s", "run_p95_s"]] = float("nan")
    frame.attrs.update(freq=stride, window=(start, end), kept_from=kept_from)
    return frame


def grid_frame(
    records: Sequence[RawFlow], grid: pd.DatetimeIndex, pairs: Sequence[tuple[str, str]], after: pd.Timestamp
) -> pd.DataFrame:
    """The frame's rows: ``records`` summed into the periods of ``grid`` for every ``(queue, kind)`` of ``pairs``;
    records
    starting at or after ``after`` (the end of the window's last period) are left out."""
    values = record_values(records)
    starts = pd.to_datetime([record[0] for record in records], unit="s", utc=True).as_unit("ns")
    # A record counts in the last period of the grid that starts at or before it (an hour's record in its hour).
    position = grid.searchsorted(starts, side="right") - 1
    keep = (position >= 0) & (starts < after)
    kept = [(queue, kind) for (_, queue, kind, _), k in zip(records, keep, strict=True) if k]
    index = pd.MultiIndex.from_arrays(
        [grid[position[keep]], [q for q, _ in kept], [kind for _, kind in kept]], names=["period", "queue", "kind"]
    )
    sums = pd.DataFrame(values[keep], index=index).groupby(level=["period", "queue", "kind"]).sum()
    full = pd.MultiIndex.from_tuples(
        [(period, queue, kind) for period in grid for queue, kind in pairs], names=["period", "queue", "kind"]
    )
    table = sums.reindex(full, fill_value=0).to_numpy(dtype=np.int64).reshape(len(full), _WIDTH)
    waits = table[:, len(COUNTS) : len(COUNTS) + BUCKETS]
    runs = table[:, len(COUNTS) + BUCKETS :]
    columns: dict[str, Any] = {
        "period": full.get_level_values("period"),
        "queue": full.get_level_values("queue").tolist(),
        "kind": full.get_level_values("kind").tolist(),
        **{name: table[:, i] for i, name in enumerate(COUNTS)},
        "wait_p50_s": percentiles(waits, 0.5),
        "wait_p95_s": percentiles(waits, 0.95),
        "run_p50_s": percentiles(runs, 0.5),
        "run_p95_s": percentiles(runs, 0.95),
    }
    return typed_frame(columns, THROUGHPUT_COLUMNS)
