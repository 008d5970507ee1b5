"""Pictures of the queue for notebooks: matplotlib, from the ``notebook`` extra, imported only when drawing.

The worker image installs opslib without matplotlib, so nothing here is
imported before a plot is asked for, and its absence is one clear error.

Every chart of counts per period draws the same way, through
:func:`opslib.period_chart.draw_periods`: each count its own bar, side by
side in its period; the axis the window the frame names, with a "now" mark
when it ends now; periods past retention shaded "not kept"; times in the
display zone with its name; titles in words ("dead letters per hour"). Each
chart counts one thing in one unit, said on its axis: ``plot_history`` dead
letters (entries), ``plot_throughput`` jobs, with retried attempts a series
of their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from opslib.archive import history
from opslib.archive_frames import HISTORY_COLUMNS, HISTORY_MEASURES
from opslib.errors import OpslibError
from opslib.flow import THROUGHPUT_COLUMNS, throughput
from opslib.period_chart import chart_window, draw_periods, freq_words

LABELS = {
    "died": "died",
    "replayed": "replayed",
    "discarded": "discarded",
    "succeeded_after_replay": "succeeded after replay",
}
STYLES = {
    "died": {"color": "#c0392b"},
    "replayed": {"color": "#2e86c1"},
    "discarded": {"color": "#7f8c8d"},
    "succeeded_after_replay": {"color": "#27ae60"},
}
"""One colour per count, the same in every chart (matplotlib's tab10 order would change with the columns)."""
FLOW_LABELS = {"succeeded": "succeeded (jobs)", "dead": "failed: dead (jobs)", "retried": "retried (attempts)"}
FLOW_STYLES = {
    "succeeded": {"color": "#27ae60"},
    "dead": {"color": "#c0392b"},
    "retried": {"color": "#f5b7b1", "hatch": "//", "edgecolor": "#c0392b"},
}


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


def _check_history(frame: pd.DataFrame, args: Sequence[str]) -> None:
    """An :class:`OpslibError` when ``frame`` comes with ``history()``'s arguments or is not a ``history()`` frame."""
    if args:
        raise OpslibError(f"plot_history got a frame and history()'s arguments {sorted(args)}; pass one or the other")
    missing = set(HISTORY_COLUMNS) - set(frame.columns)
    if missing:
        raise OpslibError(f"plot_history needs a history() frame; this one lacks {', '.join(sorted(missing))}")


def plot_history(frame: pd.DataFrame | None = None, *, kind: str | None = None, ax: Any = None, **args: Any) -> Any:
    """Draw a ``history()`` frame: dead letters that died, were replayed, discarded, succeeded, per period.

    Summed over the kinds of ``frame`` (``kind=`` keeps one), the four
    counts side by side in each period (an entry that died and was replayed
    in one hour is in two bars, never added up); the axis is the frame's
    window, with a "now" mark when it ends now. With no
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
    totals = frame.groupby("period")[list(HISTORY_MEASURES)].sum(min_count=1).sort_index()
    if ax is None:
        _figure, ax = plt.subplots(figsize=(9, 3.2), layout="constrained")
    what = f"dead letters of {kind}" if kind else "dead letters"
    ax.set_title(f"{what} per {freq_words(stride)}", loc="left")
    ax.set_ylabel("dead letters")
    window = chart_window(frame, pd.DatetimeIndex(totals.index), stride)
    draw_periods(ax, totals, stride, window=window, labels=LABELS, styles=STYLES)
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
    """Draw a ``throughput()`` frame: jobs that succeeded and jobs that failed (died) per period, with the
    retried attempts beside them as a series of their own (hatched: attempts, not jobs), and the largest
    wait p95 of the kinds on a second axis.

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
    grouped = frame.groupby("period")
    totals = grouped[list(FLOW_LABELS)].sum(min_count=1).sort_index()
    wait_p95 = grouped["wait_p95_s"].max().sort_index()
    if ax is None:
        _figure, ax = plt.subplots(figsize=(9, 3.2), layout="constrained")
    ax.set_title(f"jobs{f' of {kind}' if kind else ''} per {freq_words(stride)}", loc="left")
    ax.set_ylabel("jobs (retried: attempts)")
    window = chart_window(frame, pd.DatetimeIndex(totals.index), stride)
    busy = draw_periods(ax, totals, stride, window=window, labels=FLOW_LABELS, styles=FLOW_STYLES)
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
