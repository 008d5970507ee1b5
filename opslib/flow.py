"""The flow over time: how many jobs of each kind succeeded, were retried and died, and how long they waited
and ran, per period, from the counters the workers keep in Redis (:mod:`worker.store.flow`).

:func:`throughput` reads the counters; :func:`flow_to_frame` turns what it
read into the frame, without Redis. Minutes are kept a day and hours
``FLOW_RETENTION`` days (8): a window reaching further back than a day reads
the hours there, so with a ``freq`` under an hour its older rows are an hour
apart.

Columns (fixed dtypes, also when empty):

============  ========================  ==============================================
column        dtype                     holds
============  ========================  ==============================================
period        datetime64[ns, UTC]       the period's start (``freq`` long)
kind          str                       the job kind
succeeded     int64                     jobs whose handler returned
retried       int64                     failed attempts put back for a retry
dead          int64                     jobs dead-lettered (whether or not they ran)
wait_p50_s    float64                   median wait from enqueue (or due time) to start
wait_p95_s    float64                   95th percentile of the wait
run_p50_s     float64                   median run time of the attempts
run_p95_s     float64                   95th percentile of the run time
============  ========================  ==============================================

The percentiles come from log-spaced buckets (each bound twice the last),
interpolated inside the bucket: read them as "about"; NaN when nothing
started (or ran) in the period.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import redis

from opslib.archive_frames import FREQ_EXAMPLES, MAX_PERIODS, parse_freq, period_of
from opslib.checks import check_kind
from opslib.columns import COUNT, TEXT, TIME, typed_frame
from opslib.connection import partitions, redis_session
from opslib.display import local_time
from opslib.errors import OpslibError
from opslib.times import check_window
from worker.store.flow import BOUNDS_S, BUCKETS, COUNTS, HOUR_S, MINUTE_S, MINUTES_KEPT_S, RUN, WAIT, bucket_field
from worker.store.keys import Keys
from worker.store.wire import text

FLOAT = "float64"
THROUGHPUT_COLUMNS = {
    "period": TIME,
    "kind": TEXT,
    "succeeded": COUNT,
    "retried": COUNT,
    "dead": COUNT,
    "wait_p50_s": FLOAT,
    "wait_p95_s": FLOAT,
    "run_p50_s": FLOAT,
    "run_p95_s": FLOAT,
}
#: One raw record: the start of a minute or hour (epoch seconds), its kind, and its hash's fields (as read:
#: bytes, or text and numbers).
RawFlow = tuple[int, str, Mapping[Any, Any]]

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


def periods_grid(
    stride: pd.Timedelta, start: pd.Timestamp, end: pd.Timestamp, cut: pd.Timestamp | None
) -> pd.DatetimeIndex:
    """The periods of the window: ``stride`` apart, but an hour apart before ``cut`` (where only hours are
    kept) when ``stride`` is shorter."""
    hour = pd.Timedelta(hours=1)
    last_instant = end - pd.Timedelta(microseconds=1)
    periods = pd.date_range(period_of(start, stride), period_of(last_instant, stride), freq=stride)
    if cut is None or stride >= hour or periods.empty or cut <= periods[0]:
        return periods
    hours = pd.date_range(period_of(start, hour), min(cut - hour, period_of(last_instant, hour)), freq=hour)
    return hours.append(periods[periods >= cut])


def flow_to_frame(
    raw: Iterable[RawFlow],
    freq: object = "1min",
    *,
    start: pd.Timestamp,
    end: pd.Timestamp,
    cut: pd.Timestamp | None = None,
    kinds: Sequence[str] = (),
) -> pd.DataFrame:
    """The ``throughput()`` frame of ``raw`` records (minute or hour hashes as read), one row per period of
    the window ``[start, end)`` and kind (zeros when nothing happened). ``cut``: before it the records are
    hours. ``kinds``: kinds to show even without a record."""
    stride = parse_freq(freq)
    records = list(raw)
    every_kind = sorted({kind for _, kind, _ in records} | set(kinds))
    grid = periods_grid(stride, start, end, cut)
    if not every_kind or grid.empty:
        frame = typed_frame({}, THROUGHPUT_COLUMNS)
        frame.attrs["freq"] = stride
        return frame
    if len(grid) * len(every_kind) > MAX_PERIODS:
        raise OpslibError(
            f"a throughput of {len(grid):,} periods of {stride} for {len(every_kind)} kinds is too long to show; "
            f"choose a longer freq ({FREQ_EXAMPLES}), a later since= or one kind"
        )
    values = np.zeros((len(records), _WIDTH), dtype=np.int64)
    for row, (_, _, fields) in enumerate(records):
        for name, n in fields.items():
            slot = _SLOTS.get(name)
            if slot is not None:
                values[row, slot] = int(n)
    starts = pd.to_datetime([s for s, _, _ in records], unit="s", utc=True).as_unit("ns")
    # A record counts in the last period of the grid that starts at or before it (an hour's record in its hour),
    # if it starts before the end of the window's last period.
    position = grid.searchsorted(starts, side="right") - 1
    keep = (position >= 0) & (starts < period_of(end - pd.Timedelta(microseconds=1), stride) + stride)
    index = pd.MultiIndex.from_arrays(
        [grid[position[keep]], [kind for (_, kind, _), k in zip(records, keep, strict=True) if k]],
        names=["period", "kind"],
    )
    sums = pd.DataFrame(values[keep], index=index).groupby(level=["period", "kind"]).sum()
    full = pd.MultiIndex.from_product([grid, every_kind], names=["period", "kind"])
    table = sums.reindex(full, fill_value=0).to_numpy(dtype=np.int64).reshape(len(full), _WIDTH)
    waits = table[:, len(COUNTS) : len(COUNTS) + BUCKETS]
    runs = table[:, len(COUNTS) + BUCKETS :]
    columns: dict[str, Any] = {
        "period": full.get_level_values("period"),
        "kind": full.get_level_values("kind").tolist(),
        **{name: table[:, i] for i, name in enumerate(COUNTS)},
        "wait_p50_s": percentiles(waits, 0.5),
        "wait_p95_s": percentiles(waits, 0.95),
        "run_p50_s": percentiles(runs, 0.5),
        "run_p95_s": percentiles(runs, 0.95),
    }
    frame = typed_frame(columns, THROUGHPUT_COLUMNS)
    frame.attrs["freq"] = stride
    return frame


def read_flow(
    client: Any, parts: Sequence[Keys], kinds: Sequence[str], spans: Iterable[tuple[int, int, int]]
) -> list[RawFlow]:
    """Every hash of ``kinds`` in each partition for each ``(period_s, first_s, after_s)`` span, in one pipeline."""
    wanted = [
        (start_s, kind, keys.flow(period_s, start_s, kind))
        for period_s, first_s, after_s in spans
        for start_s in range(first_s, after_s, period_s)
        for keys in parts
        for kind in kinds
    ]
    pipe = client.pipeline(transaction=False)
    for _, _, key in wanted:
        pipe.hgetall(key)
    replies = pipe.execute()
    return [(start_s, kind, reply) for (start_s, kind, _), reply in zip(wanted, replies, strict=True) if reply]


def throughput(
    kind: str | None = None,
    *,
    freq: object = "1min",
    since: object = None,
    until: object = None,
    client: redis.Redis | None = None,
    prefix: str | None = None,
) -> pd.DataFrame:
    """Jobs succeeded, retried and dead, and their wait and run percentiles, per period and kind (columns in
    the module docstring), from the workers' flow counters.

    ``freq``: the period (``"1min"``, ``"15min"``, ``"1h"``, ``"1D"``...; a whole
    number of minutes); ``since`` / ``until``: the window (times, read in the
    display zone unless they name one, or durations back from now; with no
    ``since``, the hour before ``until`` or now). ``kind`` keeps one kind. ``attrs["freq"]`` holds the
    period, for :func:`opslib.plot_throughput`.

    >>> opslib.throughput(freq="15min", since="6h").groupby("kind")[["succeeded", "dead"]].sum()
    """
    stride = parse_freq(freq)
    if stride % pd.Timedelta(minutes=1):
        raise OpslibError(
            f"freq={freq!r} is finer than the counters' minutes; give whole minutes, such as {FREQ_EXAMPLES}"
        )
    start, end = check_window(since, until)
    now = pd.Timestamp.now(tz="UTC")
    end = min(end, now) if end is not None else now
    start = start if start is not None else end - pd.Timedelta(hours=1)
    if start >= end:
        raise OpslibError(f"since ({local_time(start)}) must be before until and before now ({local_time(end)})")
    cut_s = -(-(int(now.timestamp()) - MINUTES_KEPT_S) // HOUR_S) * HOUR_S
    first_s = int(period_of(start, stride).timestamp())
    after_s = int((period_of(end - pd.Timedelta(microseconds=1), stride) + stride).timestamp())
    spans = [
        (HOUR_S, first_s // HOUR_S * HOUR_S, min(after_s, cut_s)),
        (MINUTE_S, max(first_s, cut_s) // MINUTE_S * MINUTE_S, after_s),
    ]
    with redis_session(client, prefix, "read the flow counters") as (redis_client, keys):
        parts = partitions(redis_client, keys)
        pipe = redis_client.pipeline(transaction=False)
        for p in parts:
            pipe.smembers(p.flow_kinds)
        held = sorted({text(k) for members in pipe.execute() for k in members})
        kinds = held if kind is None else [check_kind(kind, held, holder="the flow counters hold")]
        raw = read_flow(redis_client, parts, kinds, spans)
    cut = pd.Timestamp(cut_s, unit="s", tz="UTC")
    return flow_to_frame(raw, stride, start=start, end=end, cut=cut if start < cut else None, kinds=kinds)
