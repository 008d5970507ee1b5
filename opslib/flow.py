"""The flow over time: how many jobs of each kind succeeded, were retried and died, and how long they waited
and ran, per period, from the counters the workers keep in Redis (:mod:`worker.store.flow`).

:func:`throughput` reads the counters; :func:`opslib.flow_frames.flow_to_frame`
turns what it read into the frame (its columns are listed there), without
Redis. Minutes are kept a day and hours ``FLOW_RETENTION`` days (8): a window
reaching further back than a day reads the hours there, so with a ``freq``
under an hour its older rows are an hour apart; periods older than the
retention are not read at all, and their counts are missing ("not kept").
The number of periods is checked before anything is read (at most
:data:`opslib.archive_frames.MAX_PERIODS` rows), so no window, however long,
makes a read allocate by its length.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd
import redis

from opslib.archive_frames import FREQ_EXAMPLES, busy_periods, parse_freq, period_of
from opslib.checks import check_kind
from opslib.connection import partitions, redis_session, settings
from opslib.display import local_time
from opslib.errors import OpslibError
from opslib.flow_frames import THROUGHPUT_COLUMNS, RawFlow, check_periods, flow_to_frame, grid_spans, period_count
from opslib.times import check_window
from worker.store.flow import COUNTS, HOUR_S, MINUTE_S, MINUTES_KEPT_S
from worker.store.keys import Keys
from worker.store.wire import text

__all__ = ["THROUGHPUT_COLUMNS", "read_flow", "throughput"]


def read_flow(
    client: Any, parts: Sequence[Keys], pairs: Sequence[tuple[str, str]], spans: Iterable[tuple[int, int, int]]
) -> list[RawFlow]:
    """Every hash of the ``(queue, kind)`` pairs in each partition of their queue for each ``(period_s, first_s,
    after_s)`` span, in one pipeline."""
    wanted = [
        (start_s, queue, kind, keys.flow(period_s, start_s, kind))
        for period_s, first_s, after_s in spans
        for start_s in range(first_s, after_s, period_s)
        for keys in parts
        for queue, kind in pairs
        if keys.queue == queue
    ]
    pipe = client.pipeline(transaction=False)
    for *_, key in wanted:
        pipe.hgetall(key)
    replies = pipe.execute()
    return [(start_s, q, kind, reply) for (start_s, q, kind, _), reply in zip(wanted, replies, strict=True) if reply]


def held_pairs(client: Any, parts: Sequence[Keys]) -> list[tuple[str, str]]:
    """The ``(queue, kind)`` pairs the flow counters hold (each queue's ``flow:kinds`` over its partitions)."""
    pipe = client.pipeline(transaction=False)
    for p in parts:
        pipe.smembers(p.flow_kinds)
    replies = pipe.execute()
    return sorted({(p.queue, text(k)) for p, members in zip(parts, replies, strict=True) for k in members})


def throughput(
    kind: str | None = None,
    *,
    freq: object = "1min",
    since: object = None,
    until: object = None,
    busy: bool = False,
    client: redis.Redis | None = None,
    prefix: str | None = None,
) -> pd.DataFrame:
    """Jobs succeeded, retried and dead, and their wait and run percentiles, per period, named queue and kind
    (columns in :mod:`opslib.flow_frames`), from the workers' flow counters of every queue in use.

    ``freq``: the period (``"1min"``, ``"15min"``, ``"1h"``, ``"1D"``...; a whole
    number of minutes); ``since`` / ``until``: the window (the grammar of
    :mod:`opslib.times`: ``"2h"``, ``"9pm"``, ``"yesterday 21:00"``, ISO times;
    with no ``since``, the hour before ``until`` or now). ``kind`` keeps one
    kind (in every queue that ran it); ``busy=True`` only the periods where something happened.
    ``attrs["freq"]`` and ``attrs["window"]`` hold the period and the window,
    for :func:`opslib.plot_throughput`.

    >>> opslib.throughput(freq="15min", since="6h").groupby(["queue", "kind"])[["succeeded", "dead"]].sum()
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
    kept_s = -(-(int(now.timestamp()) - settings().flow_retention_days * 86_400) // HOUR_S) * HOUR_S
    cut, kept_from = (pd.Timestamp(s, unit="s", tz="UTC") for s in (cut_s, kept_s))
    periods = period_count(grid_spans(stride, start, end, cut if start < cut else None))
    with redis_session(client, prefix, "read the flow counters") as (redis_client, keys):
        parts = partitions(redis_client, keys)
        pairs = held_pairs(redis_client, parts)
        if kind is not None:
            chosen = check_kind(kind, sorted({k for _, k in pairs}), holder="the flow counters hold")
            pairs = [(q, k) for q, k in pairs if k == chosen]
        check_periods(periods, max(len(pairs), 1), stride)
        raw = read_flow(redis_client, parts, pairs, spans(stride, start, end, cut_s, kept_s))
    frame = flow_to_frame(
        raw, stride, start=start, end=end, cut=cut if start < cut else None, kinds=pairs,
        kept_from=kept_from if start < kept_from else None,
    )  # fmt: skip
    return busy_periods(frame, COUNTS) if busy else frame


def spans(
    stride: pd.Timedelta, start: pd.Timestamp, end: pd.Timestamp, cut_s: int, kept_s: int
) -> list[tuple[int, int, int]]:
    """The ``(period_s, first_s, after_s)`` spans to read: hours from ``kept_s`` (none older: they are gone)
    up to ``cut_s``, minutes from there, over the periods of the window."""
    first_s = int(period_of(start, stride).timestamp())
    after_s = int((period_of(end - pd.Timedelta(microseconds=1), stride) + stride).timestamp())
    return [
        (HOUR_S, max(first_s // HOUR_S * HOUR_S, kept_s), min(after_s, cut_s)),
        (MINUTE_S, max(first_s, cut_s) // MINUTE_S * MINUTE_S, after_s),
    ]
