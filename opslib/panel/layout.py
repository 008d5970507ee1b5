"""The dead-letter panel's widgets and where they stand, without behaviour (:mod:`opslib.panel.widgets` adds it).

Top to bottom: the header (the queue's counts, Reload, the Auto-refresh
toggle, the last hour's flow as a sparkline), the filters, the failure groups, the group and its entries with
their pager, then the actions right under the selection (Replay, Discard
with its reason, CSV) and their Confirm question, so that what is chosen and
the button that acts on it are on one screen; below them the result, the
status, the selected entry's traceback and the preview of what an action
takes.
"""

from __future__ import annotations

import ipywidgets as w

ENTRY_ROWS = 200
"""The entry list shows a page of this many entries, newest first; Older and Newer turn the pages."""
AUTO_REFRESH_S = 10
"""With Auto-refresh on, the panel reads the queue again this often (never while a question is open)."""
CLASSES = {
    "counts": "opslib-counts",
    "flow": "opslib-flow",
    "table": "opslib-groups",
    "entry": "opslib-entry",
    "preview": "opslib-preview",
    "result": "opslib-result",
    "status": "opslib-status",
    "message": "opslib-message",
    "filter_message": "opslib-filter-message",
    "page": "opslib-page",
    "csv": "opslib-csv",
}
"""CSS classes of the HTML parts (the browser test finds them by these)."""


class PanelWidgets:
    """The panel's widgets and their layout, without behaviour (``.box`` is what is displayed)."""

    def __init__(self) -> None:
        wide = w.Layout(width="95%")
        self.counts, self.table, self.entry = w.HTML(), w.HTML(), w.HTML()
        self.preview, self.result, self.status = w.HTML(), w.HTML(), w.HTML()
        self.message, self.filter_message, self.page, self.csv = w.HTML(), w.HTML(), w.HTML(), w.HTML()
        self.flow = w.HTML()
        self.reload = w.Button(description="Reload", icon="refresh")
        self.auto = w.ToggleButton(
            description="Auto-refresh", icon="clock-o", tooltip=f"read the queue again every {AUTO_REFRESH_S} s"
        )
        self.kind = w.Dropdown(description="Kind")
        self.search = w.Text(description="Search", placeholder="in errors and payloads", continuous_update=False)
        self.since = w.Text(description="From", placeholder="2h, 3d or 2026-11-30 21:00", continuous_update=False)
        self.until = w.Text(description="To", placeholder="empty: now", continuous_update=False)
        self.group = w.Dropdown(description="Group", layout=wide)
        self.entries = w.SelectMultiple(description="Entries", rows=8, layout=wide)
        self.newer = w.Button(description="‹ Newer", disabled=True)
        self.older = w.Button(description="Older ›", disabled=True)
        self.replay_button = w.Button(description="Replay…", button_style="warning", disabled=True)
        self.discard_button = w.Button(description="Discard…", button_style="danger", disabled=True)
        self.reason = w.Text(
            description="Reason", placeholder="why these jobs must never run (required)", layout=w.Layout(width="40%")
        )
        self.patch = w.Text(description="Set", placeholder="field=value; ...", layout=w.Layout(width="30%"))
        self.csv_button = w.Button(description="CSV…", icon="download", tooltip="the entries an action would take")
        self.question = w.HTML()
        self.confirm = w.Button(description="Confirm replay", button_style="danger")
        self.cancel = w.Button(description="Cancel")
        self.asking = w.HBox([self.question, self.confirm, self.cancel], layout=w.Layout(display="none"))
        self.progress = w.IntProgress(min=0, max=1, value=0, layout=w.Layout(display="none"))
        self.refresh_status = w.Button(description="Refresh status", layout=w.Layout(display="none"))
        for name, css in CLASSES.items():
            getattr(self, name).add_class(css)
        filters = w.HBox([self.kind, self.search, self.since, self.until]).add_class("opslib-filters")
        actions = w.HBox([self.replay_button, self.patch, self.discard_button, self.reason, self.csv_button, self.csv])
        self.box = w.VBox(
            [
                w.HTML("<h3>Dead letters</h3>"),
                w.HBox([self.counts, self.reload, self.auto]),
                self.flow,
                filters,
                self.filter_message,
                self.table,
                self.group,
                self.entries,
                w.HBox([self.newer, self.page, self.older]),
                actions.add_class("opslib-actions"),
                self.asking,
                self.message,
                self.progress,
                self.result,
                self.status,
                self.refresh_status,
                self.entry,
                self.preview,
            ]
        )
