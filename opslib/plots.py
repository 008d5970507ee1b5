"""Pictures of the archive for notebooks: matplotlib, from the ``notebook`` extra, imported only when drawing.

The worker image installs opslib without matplotlib, so nothing here is
imported before a plot is asked for, and its absence is one clear error.
"""

from __future__ import annotations

import zoneinfo
from typing import Any

import pandas as pd

from opslib.archive import history
from opslib.archive_frames import HISTORY_COLUMNS, HISTORY_MEASURES, freq_label
from opslib.display import display_tz
from opslib.errors import OpslibError
from opslib.flow import THROUGHPUT_COLUMNS, throughput

LABELS = {
    "died": "died",
    "replayed": "replayed",
    "discarded": "discarded",
    "succeeded_after_replay": "succeeded after replay",
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


def plot_history(frame: pd.DataFrame | None = None, *, kind: str | None = None, ax: Any = None, **args: Any) -> Any:
    """Draw a ``history()`` frame: dead letters that died, were replayed, discarded, succeeded, per period.

    Summed over the kinds of ``frame`` (``kind=`` keeps one). With no frame,
    ``history(kind=kind, **args)`` is read first, so one call draws the last
    day: ``opslib.plot_history(since=pd.Timedelta("1D"))``. Also
    ``opslib.history(freq="1D").pipe(opslib.plot_history)``. Draws on ``ax``
    or on a new figure; returns the Axes. The time axis reads in the display
    time zone (``opslib.set_display_tz`` / ``OPSLIB_TZ``); the bars stand
    where the UTC periods are (a day's period starts at UTC midnight).
    """
    plt = _pyplot()
    if frame is None:
        frame = history(kind=kind, **args)
    elif args:
        raise OpslibError(f"plot_history got a frame and history()'s arguments {sorted(args)}; pass one or the other")
    missing = set(HISTORY_COLUMNS) - set(frame.columns)
    if missing:
        raise OpslibError(f"plot_history needs a history() frame; this one lacks {', '.join(sorted(missing))}")
    if kind is not None:
        frame = frame[frame["kind"] == kind]
    stride = frame.attrs.get("freq")
    totals = frame.groupby("period")[list(HISTORY_MEASURES)].sum().sort_index()
    if ax is None:
        _figure, ax = plt.subplots(figsize=(9, 3))
    title = f"dead letters of {kind}" if kind else "dead letters"
    ax.set_title(f"{title} per {freq_label(stride)}" if stride is not None else title)
    ax.set_ylabel("entries")
    tz = display_tz()
    ax.set_xlabel(f"period (times in {tz})")
    if totals.empty:
        ax.text(0.5, 0.5, "nothing in the archive for this window", transform=ax.transAxes, ha="center")
        return ax
    import matplotlib.dates as dates  # found, since pyplot was

    # Per period, one bar for each count side by side, in the period's first four fifths.
    start = dates.date2num(totals.index.to_pydatetime())
    length_days = (stride or pd.Timedelta("1h")) / pd.Timedelta("1D")
    width = length_days / (len(HISTORY_MEASURES) + 1)
    for offset, measure in enumerate(HISTORY_MEASURES):
        ax.bar(start + offset * width, totals[measure].to_numpy(), width=width, align="edge", label=LABELS[measure])
    ax.set_xlim(start[0] - length_days / 2, start[-1] + length_days * 1.5)
    zone = zoneinfo.ZoneInfo(tz)
    locator = dates.AutoDateLocator(tz=zone)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(dates.ConciseDateFormatter(locator, tz=zone))
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.legend(loc="upper left", frameon=False, ncols=len(HISTORY_MEASURES), fontsize="small")
    ax.set_ylim(0, max(1, int(totals.to_numpy().max())) * 1.25)
    return ax


def plot_throughput(frame: pd.DataFrame | None = None, *, kind: str | None = None, ax: Any = None, **args: Any) -> Any:
    """Draw a ``throughput()`` frame: jobs succeeded and failed (retried or dead) per period, stacked, with
    the largest wait p95 of the kinds on a second axis.

    With no frame, ``throughput(kind, **args)`` is read first:
    ``opslib.plot_throughput(since="6h", freq="15min")``. ``kind=`` keeps one
    kind of a frame. Draws on ``ax`` or a new figure; returns the Axes. Times
    read in the display time zone.
    """
    plt = _pyplot()
    if frame is None:
        frame = throughput(kind, **args)
    elif args:
        raise OpslibError(
            f"plot_throughput got a frame and throughput()'s arguments {sorted(args)}; pass one or the other"
        )
    missing = set(THROUGHPUT_COLUMNS) - set(frame.columns)
    if missing:
        raise OpslibError(f"plot_throughput needs a throughput() frame; this one lacks {', '.join(sorted(missing))}")
    if kind is not None:
        frame = frame[frame["kind"] == kind]
    stride = frame.attrs.get("freq") or pd.Timedelta("1min")
    totals = frame.assign(failed=frame["retried"] + frame["dead"]).groupby("period")
    counts = totals[["succeeded", "failed"]].sum().sort_index()
    wait_p95 = totals["wait_p95_s"].max().sort_index()
    if ax is None:
        _figure, ax = plt.subplots(figsize=(9, 3))
    ax.set_title(f"jobs{f' of {kind}' if kind else ''} per {freq_label(stride)}")
    ax.set_ylabel("jobs")
    tz = display_tz()
    ax.set_xlabel(f"period (times in {tz})")
    if counts.empty:
        ax.text(0.5, 0.5, "no flow counted in this window", transform=ax.transAxes, ha="center")
        return ax
    import matplotlib.dates as dates  # found, since pyplot was

    middle = dates.date2num((counts.index + stride / 2).to_pydatetime())
    width = stride / pd.Timedelta("1D") * 0.9
    ax.bar(middle, counts["succeeded"].to_numpy(), width=width, label="succeeded", color="tab:green")
    ax.bar(
        middle,
        counts["failed"].to_numpy(),
        width=width,
        bottom=counts["succeeded"].to_numpy(),
        label="failed",
        color="tab:red",
    )
    waits = ax.twinx()
    waits.plot(middle, wait_p95.to_numpy(), color="tab:blue", marker=".", linewidth=1, label="wait p95")
    waits.set_ylabel("wait p95 (s)")
    waits.set_ylim(bottom=0)
    zone = zoneinfo.ZoneInfo(tz)
    locator = dates.AutoDateLocator(tz=zone)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(dates.ConciseDateFormatter(locator, tz=zone))
    ax.yaxis.get_major_locator().set_params(integer=True)
    handles = ax.get_legend_handles_labels()[0] + waits.get_legend_handles_labels()[0]
    ax.legend(handles=handles, loc="upper left", frameon=False, ncols=3, fontsize="small")
    ax.set_ylim(0, max(1, int(counts.sum(axis=1).max())) * 1.25)
    return ax
