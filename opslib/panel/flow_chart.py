"""The dashboard's flow tab: a chart per kind (and per queue, when the flow frame has a ``queue`` column)
over a chosen window, from ``opslib.throughput()``.

Each chart draws three series per period: succeeded (jobs), retried (failed
attempts put back for a retry: attempts, not jobs) and dead (jobs
dead-lettered), side by side as lines over one scale, never stacked; a
series that stayed at 0 is the grey baseline. Its sums and the scale's top
are written beside it. The axis is the window it names and ends at now, marked
by a line at the right edge. Only numbers and escaped names reach the page.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ipywidgets as w
import pandas as pd

from opslib.display import display_tz, escape_html, local_time
from opslib.errors import OpslibError
from opslib.flow import throughput
from opslib.panel.html import error_html, polyline
from opslib.panel.view_state import DEFAULT_WINDOW, WINDOWS

FREQ = {"1h": "1min", "6h": "5min", "24h": "15min", "7d": "1h"}
"""The period each window is drawn in (at most a few hundred points a chart)."""
SERIES = (("succeeded", "#27ae60"), ("retried", "#e67e22"), ("dead", "#c0392b"))
WIDTH, HEIGHT = 420, 60


def chart_svg(rows: pd.DataFrame, label: str) -> str:
    """One chart: the three series of ``rows`` (one row per period, oldest first) and the now mark."""
    top = max(1, *(int(rows[name].max()) for name, _colour in SERIES)) if len(rows) else 1
    drawn = [(rows[name].astype(int).tolist(), colour) for name, colour in SERIES if len(rows) and rows[name].any()]
    lines = "".join(polyline(values, top, colour, WIDTH, HEIGHT) for values, colour in drawn)  # 0: the baseline
    base = f'<line x1="0" y1="{HEIGHT - 1}" x2="{WIDTH}" y2="{HEIGHT - 1}" stroke="#bbb"/>'
    now = f'<line x1="{WIDTH - 1}" y1="0" x2="{WIDTH - 1}" y2="{HEIGHT}" stroke="#555" stroke-dasharray="2,2"/>'
    title = escape_html(f"{label}, at most {top:,} a period")
    return (
        f'<svg width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{title}" '
        f'style="background:#fafafa;vertical-align:middle"><title>{title}</title>{base}{lines}{now}</svg>'
    )


def flow_charts_html(flow: pd.DataFrame, window: str) -> str:
    """A chart per kind (per queue and kind when ``flow`` has a ``queue`` column), the busiest first."""
    if flow.empty:
        return f"<p>No flow counted in the last {escape_html(window)}.</p>"
    flow = flow.fillna(dict.fromkeys((name for name, _colour in SERIES), 0))  # "not kept" periods: drawn as 0
    keys = ["queue", "kind"] if "queue" in flow else ["kind"]
    sums = flow.groupby(keys)[[name for name, _colour in SERIES]].sum()
    order = sums.sum(axis=1).sort_values(ascending=False, kind="stable")
    start, end = flow["period"].min(), pd.Timestamp.now(tz="UTC")
    head = (
        f"<p>Jobs per {escape_html(FREQ[window])} over the last {escape_html(window)}: from "
        f"{escape_html(local_time(start))} to now ({escape_html(local_time(end))}, the dashed line), "
        f"times in {escape_html(display_tz())}. "
        + " · ".join(f'<span style="color:{colour}">{name}</span>' for name, colour in SERIES)
        + " (retried counts attempts put back, dead counts jobs)</p>"
    )
    rows = []
    for key in order.index:
        group = key if isinstance(key, tuple) else (key,)
        mask = pd.Series(True, index=flow.index)
        for column, value in zip(keys, group, strict=True):
            mask &= flow[column] == value
        per_period = flow[mask].groupby("period")[[name for name, _colour in SERIES]].sum().sort_index()
        name = " / ".join(str(part) for part in group)
        totals = " · ".join(f"{int(sums.loc[key, series]):,} {series}" for series, _colour in SERIES)
        peak = int(per_period.max().max()) if len(per_period) else 0
        totals += f" (top of the chart: {max(peak, 1):,} a period)"
        rows.append(
            f"<tr><td><b>{escape_html(name)}</b></td><td>{chart_svg(per_period, name)}</td>"
            f"<td>{escape_html(totals)}</td></tr>"
        )
    return head + '<table class="opslib-flow-charts">' + "".join(rows) + "</table>"


class FlowTab:
    """The flow tab (``.box``): a window selector and the charts; ``on_change`` is called when the window changes."""

    def __init__(self, at: dict[str, Any], on_change: Callable[[], None]) -> None:
        self.at, self.on_change = at, on_change
        self.window = w.ToggleButtons(options=list(WINDOWS), value=DEFAULT_WINDOW, description="Window")
        self.charts = w.HTML().add_class("opslib-flow-tab")
        self.window.observe(lambda _change: self._window_chosen(), names="value")
        self.box = w.VBox([self.window, self.charts])

    def _window_chosen(self) -> None:
        self.load()
        self.on_change()

    def load(self) -> None:
        """Read the flow of the window again and draw it."""
        window = str(self.window.value)
        try:
            flow = throughput(freq=FREQ[window], since=window, **self.at)
        except OpslibError as exc:
            self.charts.value = error_html(exc)
            return
        self.charts.value = flow_charts_html(flow, window)
