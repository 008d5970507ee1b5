"""Pictures of the queue for notebooks: matplotlib, from the ``notebook`` extra, imported only when drawing.

The worker image installs opslib without matplotlib, so nothing here is
imported before a plot is asked for, and its absence is one clear error.

Every chart of counts per period draws the same way, through
:func:`draw_periods` (``plot_history`` here, ``plot_throughput`` for the
flow): one stacked bar per period, centred on it, so that events of one
minute never look spread over an hour; the time axis trimmed to the periods
where something happened, with the whole window stated under it (a 3-day
window with one busy hour shows that hour, not a hairline at the right
edge); times in the display zone with its name; titles in words ("dead
letters per hour").
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from opslib.archive import history
from opslib.archive_frames import HISTORY_COLUMNS, HISTORY_MEASURES
from opslib.display import display_tz
from opslib.errors import OpslibError
from opslib.flow import THROUGHPUT_COLUMNS, throughput

LABELS = {
    "died": "died",
    "replayed": "replayed",
    "discarded": "discarded",
    "succeeded_after_replay": "succeeded after replay",
}
COLOURS = {
    "died": "#c0392b",
    "replayed": "#2e86c1",
    "discarded": "#7f8c8d",
    "succeeded_after_replay": "#27ae60",
}
"""One colour per count, the same in every chart (matplotlib's tab10 order would change with the columns)."""
FLOW_LABELS = {"succeeded": "succeeded", "failed": "failed (retried or dead)"}
FLOW_COLOURS = {"succeeded": "#27ae60", "failed": "#c0392b"}
BAR_SHARE = 0.8
"""A bar is this share of its period wide, centred on the period."""
MIN_PERIODS = 6
"""The axis shows at least this many periods (when the window has them), the busy ones in the middle."""
UNITS = (("day", pd.Timedelta("1D")), ("hour", pd.Timedelta("1h")), ("minute", pd.Timedelta("1min")))


def _pyplot() -> Any:
    """``matplotlib.pyplot``, or an :class:`OpslibError` saying how to install it."""
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise OpslibError(
            "plotting needs matplotlib, which comes with the notebook extra: "
            "pip install 'stagedoor-jobs[notebook]' (or pip install matplotlib)"
        ) from None
    return plt


def freq_words(stride: pd.Timedelta) -> str:
    """A period length in words, for a title: ``hour``, ``day``, ``15 minutes``, ``6 hours``, ``90 seconds``."""
    for unit, size in UNITS:
        if not stride % size:
            count = stride // size
            return unit if count == 1 else f"{count} {unit}s"
    seconds = int(stride.total_seconds())
    return "second" if seconds == 1 else f"{seconds} seconds"


def _when(stamp: pd.Timestamp, zone: str) -> str:
    return stamp.tz_convert(zone).strftime("%d %b %H:%M")


def window_note(periods: pd.DatetimeIndex, busy: pd.DatetimeIndex, stride: pd.Timedelta, zone: str) -> str:
    """What the axis shows: the whole window, and where it was trimmed to (the periods with something in them)."""
    if periods.empty:
        return f"times in {zone}"
    whole = f"window {_when(periods[0], zone)} – {_when(periods[-1] + stride, zone)} {zone}"
    if busy.empty or (busy[0] == periods[0] and busy[-1] == periods[-1]):
        return whole
    return f"{whole}; shown: {_when(busy[0], zone)} – {_when(busy[-1] + stride, zone)}, where something happened"


def shown_span(
    periods: pd.DatetimeIndex, busy: pd.DatetimeIndex, stride: pd.Timedelta
) -> tuple[pd.Timestamp, pd.Timestamp]:
    """The stretch of the axis: the busy periods, widened to :data:`MIN_PERIODS` within the window.

    One busy minute alone on an axis would get ticks every 15 seconds; six
    periods give the bar its neighbours and the ticks whole periods.
    """
    window_start, window_end = periods[0], periods[-1] + stride
    first, last = busy[0], busy[-1] + stride
    extra = MIN_PERIODS * stride - (last - first)
    if extra > pd.Timedelta(0):
        first = max(window_start, min(first - extra / 2, window_end - MIN_PERIODS * stride))
        last = min(window_end, max(last + extra / 2, window_start + MIN_PERIODS * stride))
    return first, last


def draw_periods(
    ax: Any,
    totals: pd.DataFrame,
    stride: pd.Timedelta,
    *,
    labels: Mapping[str, str],
    colours: Mapping[str, str] | None = None,
) -> pd.DatetimeIndex:
    """Stack ``totals``' columns (one row per period start, UTC) as one bar per period, centred on it.

    The x axis is trimmed to the periods whose row is not all zeros (with
    half a period either side), its ticks in the display zone, its label
    stating the whole window (:func:`window_note`); the y axis counts from
    zero in whole numbers. Returns the busy periods (empty: nothing drawn,
    a sentence said so). ``plot_throughput`` draws its counts with this too.
    """
    import matplotlib.dates as dates  # found: the caller imported pyplot

    zone = display_tz()
    busy = totals.index[totals.sum(axis=1).to_numpy() > 0]
    ax.set_xlabel(window_note(pd.DatetimeIndex(totals.index), pd.DatetimeIndex(busy), stride, zone), fontsize="small")
    if busy.empty:
        ax.text(0.5, 0.5, "nothing happened in this window", transform=ax.transAxes, ha="center")
        ax.set_yticks([])
        return pd.DatetimeIndex(busy)
    length = stride / pd.Timedelta("1D")
    centres = dates.date2num((totals.index + stride / 2).to_pydatetime())
    bottom = pd.Series(0, index=totals.index, dtype="int64")
    for column in totals.columns:
        colour = (colours or {}).get(column)
        values = totals[column].astype("int64")
        ax.bar(centres, values.to_numpy(), width=length * BAR_SHARE, bottom=bottom.to_numpy(),
               label=labels.get(column, column), color=colour)  # fmt: skip
        bottom += values
    first, last = shown_span(pd.DatetimeIndex(totals.index), pd.DatetimeIndex(busy), stride)
    ax.set_xlim(dates.date2num(first.to_pydatetime()) - length / 2, dates.date2num(last.to_pydatetime()) + length / 2)
    tz = zoneinfo.ZoneInfo(zone)
    locator = dates.AutoDateLocator(tz=tz, maxticks=10)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(dates.ConciseDateFormatter(locator, tz=tz, show_offset=False))  # dates: in the label
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_ylim(0, max(1, int(bottom.max())) * 1.3)
    ax.legend(loc="upper left", frameon=False, ncols=len(totals.columns), fontsize="small")
    ax.spines[["top", "right"]].set_visible(False)
    return pd.DatetimeIndex(busy)


def _check_history(frame: pd.DataFrame, args: Sequence[str]) -> None:
    """An :class:`OpslibError` when ``frame`` comes with ``history()``'s arguments or is not a ``history()`` frame."""
    if args:
        raise OpslibError(f"plot_history got a frame and history()'s arguments {sorted(args)}; pass one or the other")
    missing = set(HISTORY_COLUMNS) - set(frame.columns)
    if missing:
        raise OpslibError(f"plot_history needs a history() frame; this one lacks {', '.join(sorted(missing))}")


def plot_history(frame: pd.DataFrame | None = None, *, kind: str | None = None, ax: Any = None, **args: Any) -> Any:
    """Draw a ``history()`` frame: dead letters that died, were replayed, discarded, succeeded, per period.

    Summed over the kinds of ``frame`` (``kind=`` keeps one), one stacked
    bar per period (:func:`draw_periods`): the axis shows the periods where
    something happened and its label states the whole window. With no
    frame, ``history(kind=kind, **args)`` is read first, so one call draws
    the last day: ``opslib.plot_history(since=pd.Timedelta("1D"))``. Also
    ``opslib.history(freq="1D").pipe(opslib.plot_history)``. Draws on ``ax``
    or on a new figure; returns the Axes. Times read in the display zone
    (``opslib.set_display_tz`` / ``OPSLIB_TZ``); the bars stand where the
    UTC periods are (a day's period starts at UTC midnight).
    """
    plt = _pyplot()
    if frame is None:
        frame = history(kind=kind, **args)
    else:
        _check_history(frame, list(args))
    if kind is not None:
        frame = frame[frame["kind"] == kind]
    stride = frame.attrs.get("freq") or pd.Timedelta("1h")
    totals = frame.groupby("period")[list(HISTORY_MEASURES)].sum().sort_index()
    if ax is None:
        _figure, ax = plt.subplots(figsize=(9, 3.2), layout="constrained")
    what = f"dead letters of {kind}" if kind else "dead letters"
    ax.set_title(f"{what} per {freq_words(stride)}", loc="left")
    ax.set_ylabel("events")  # stacked: an entry that died and was replayed in one hour counts in both
    draw_periods(ax, totals, stride, labels=LABELS, colours=COLOURS)
    return ax


def _check_throughput(frame: pd.DataFrame, args: Sequence[str]) -> None:
    """An :class:`OpslibError` when ``frame`` comes with ``throughput()``'s arguments or is not its frame."""
    if args:
        raise OpslibError(
            f"plot_throughput got a frame and throughput()'s arguments {sorted(args)}; pass one or the other"
        )
    missing = set(THROUGHPUT_COLUMNS) - set(frame.columns)
    if missing:
        raise OpslibError(f"plot_throughput needs a throughput() frame; this one lacks {', '.join(sorted(missing))}")


def plot_throughput(frame: pd.DataFrame | None = None, *, kind: str | None = None, ax: Any = None, **args: Any) -> Any:
    """Draw a ``throughput()`` frame: jobs succeeded and failed (retried or dead) per period, stacked
    (:func:`draw_periods`), with the largest wait p95 of the kinds on a second axis.

    With no frame, ``throughput(kind, **args)`` is read first:
    ``opslib.plot_throughput(since="6h", freq="15min")``. ``kind=`` keeps one
    kind of a frame. Draws on ``ax`` or a new figure; returns the Axes. Times
    read in the display zone.
    """
    plt = _pyplot()
    if frame is None:
        frame = throughput(kind, **args)
    else:
        _check_throughput(frame, list(args))
    if kind is not None:
        frame = frame[frame["kind"] == kind]
    stride = frame.attrs.get("freq") or pd.Timedelta("1min")
    grouped = frame.assign(failed=frame["retried"] + frame["dead"]).groupby("period")
    totals = grouped[["succeeded", "failed"]].sum().sort_index()
    wait_p95 = grouped["wait_p95_s"].max().sort_index()
    if ax is None:
        _figure, ax = plt.subplots(figsize=(9, 3.2), layout="constrained")
    ax.set_title(f"jobs{f' of {kind}' if kind else ''} per {freq_words(stride)}", loc="left")
    ax.set_ylabel("jobs")
    busy = draw_periods(ax, totals, stride, labels=FLOW_LABELS, colours=FLOW_COLOURS)
    if busy.empty:
        return ax
    import matplotlib.dates as dates  # found, since pyplot was

    waits = ax.twinx()
    centres = dates.date2num((wait_p95.index + stride / 2).to_pydatetime())
    waits.plot(centres, wait_p95.to_numpy(), color="#2e86c1", marker=".", linewidth=1, label="wait p95")
    waits.set_ylabel("wait p95 (s)")
    highest = wait_p95.max()
    waits.set_ylim(0, highest * 1.3 if highest > 0 else None)  # headroom for the legend, as the bars have
    handles = ax.get_legend_handles_labels()[0] + waits.get_legend_handles_labels()[0]
    ax.legend(handles=handles, loc="upper left", frameon=False, ncols=3, fontsize="small")
    return ax
