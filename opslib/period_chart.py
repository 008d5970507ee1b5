"""How every chart of counts per period is drawn (``plot_history``, ``plot_throughput``): one rule, one place.

* Counts of one period stand side by side, each its own bar, never stacked
  into a sum that means nothing (an entry that died and was replayed in one
  hour is one entry, not two "events").
* The x axis is the window the frame names (``attrs["window"]``), no more
  and no less, in the display zone with its name; a window that ends at now
  has a "now" mark there, and the bars of the period under way end at it.
* Periods older than what is kept (``attrs["kept_from"]``: missing counts,
  not zeros) are shaded and labelled "not kept".

matplotlib is imported by the caller (:func:`opslib.plots._pyplot`) before
anything here runs.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Mapping
from typing import Any

import pandas as pd

from opslib.display import display_tz

BAR_SHARE = 0.8
"""The bars of one period take this share of its width, side by side, centred on the period."""
NOW_COLOUR = "#555555"
NOT_KEPT_COLOUR = "#eeeeee"
UNITS = (("day", pd.Timedelta("1D")), ("hour", pd.Timedelta("1h")), ("minute", pd.Timedelta("1min")))


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


def chart_window(
    frame: pd.DataFrame, periods: pd.DatetimeIndex, stride: pd.Timedelta
) -> tuple[pd.Timestamp, pd.Timestamp] | None:
    """The ``(start, end)`` the axis shows: the frame's ``attrs["window"]``, else its periods' span (``None``:
    a frame without periods)."""
    window = frame.attrs.get("window")
    if window is not None and window[0] is not None and window[1] is not None:
        return pd.Timestamp(window[0]), pd.Timestamp(window[1])
    return (periods[0], periods[-1] + stride) if len(periods) else None


def draw_periods(
    ax: Any,
    totals: pd.DataFrame,
    stride: pd.Timedelta,
    *,
    window: tuple[pd.Timestamp, pd.Timestamp] | None,
    labels: Mapping[str, str],
    styles: Mapping[str, Mapping[str, object]] | None = None,
) -> pd.DatetimeIndex:
    """Draw ``totals``' columns (one row per period start, UTC) as bars side by side in each period.

    The x axis is ``window`` (``None``: no periods at all); the y axis counts from zero in whole numbers.
    ``styles`` gives each column's bar keywords (colour, hatch). Returns
    the busy periods (empty: nothing drawn, a sentence said so).
    """
    import matplotlib.dates as dates  # found: the caller imported pyplot

    zone = display_tz()
    if window is None:
        ax.set_xlabel(f"times in {zone}", fontsize="small")
    else:
        start, end = window
        ax.set_xlabel(f"window {_when(start, zone)} – {_when(end, zone)} {zone}", fontsize="small")
        ax.set_xlim(dates.date2num(start.to_pydatetime()), dates.date2num(end.to_pydatetime()))
        mark_not_kept(ax, totals, start, stride)
        mark_now(ax, start, end, stride)
    busy = totals.index[totals.fillna(0).sum(axis=1).to_numpy() > 0]
    if busy.empty:
        ax.text(0.5, 0.5, "nothing happened in this window", transform=ax.transAxes, ha="center")
        ax.set_yticks([])
        return pd.DatetimeIndex(busy)
    # A period under way at the window's end is drawn as wide as the others, ending at now: its bars stay on
    # the axis and stay visible (a night that all happened in the last minutes of the hour is most of the story).
    starts, drawn = pd.DatetimeIndex(totals.index), stride
    if window is not None:  # a window shorter than a period (the night so far, hourly) is one period wide
        drawn = min(stride, window[1] - window[0])
        starts = starts.map(lambda start: max(window[0], min(start, window[1] - drawn)))
    length = drawn / pd.Timedelta("1D")
    width = length * BAR_SHARE / len(totals.columns)
    lefts = dates.date2num(starts.to_pydatetime()) + length * (1 - BAR_SHARE) / 2
    for i, column in enumerate(totals.columns):
        values = totals[column].astype("float64").fillna(0).to_numpy()
        ax.bar(lefts + i * width, values, width=width, align="edge", label=labels.get(column, column),
               **dict((styles or {}).get(column, {})))  # fmt: skip
    tz = zoneinfo.ZoneInfo(zone)
    locator = dates.AutoDateLocator(tz=tz, maxticks=10)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(dates.ConciseDateFormatter(locator, tz=tz, show_offset=False))
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_ylim(0, max(1.0, float(totals.max().max())) * 1.3)
    ax.legend(loc="upper left", frameon=False, ncols=len(totals.columns), fontsize="small")
    ax.spines[["top", "right"]].set_visible(False)
    return pd.DatetimeIndex(busy)


def mark_now(ax: Any, start: pd.Timestamp, end: pd.Timestamp, stride: pd.Timedelta) -> None:
    """A dashed line labelled "now" at the window's end, when the window ends at now (within a period)."""
    import matplotlib.dates as dates

    now = pd.Timestamp.now(tz="UTC")
    if end > now - stride and start < now:
        x = dates.date2num(min(now, end).to_pydatetime())
        ax.axvline(x, color=NOW_COLOUR, linestyle="--", linewidth=1)
        ax.text(x, 0.98, "now ", transform=ax.get_xaxis_transform(), color=NOW_COLOUR, ha="right", va="top",
                fontsize="small")  # fmt: skip


def mark_not_kept(ax: Any, totals: pd.DataFrame, start: pd.Timestamp, stride: pd.Timedelta) -> None:
    """Shade the periods whose counts are missing (past retention) and label them "not kept"."""
    import matplotlib.dates as dates

    gone = totals.index[totals.isna().all(axis=1).to_numpy()]
    if gone.empty:
        return
    left = dates.date2num(max(start, gone[0]).to_pydatetime())
    right = dates.date2num((gone[-1] + stride).to_pydatetime())
    ax.axvspan(left, right, color=NOT_KEPT_COLOUR, zorder=0)
    ax.text((left + right) / 2, 0.5, "not kept", transform=ax.get_xaxis_transform(), ha="center", color="#888888")
