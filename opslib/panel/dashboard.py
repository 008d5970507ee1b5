"""The dashboard for notebooks and Voilà: a tab per state of a job, a flow chart per kind, and a URL per view.

``dashboard(client=None, prefix=None, query=None)`` returns an ipywidgets box:

* above the tabs, the Pause / Resume / Throttle control of a kind
  (:mod:`opslib.panel.pause_control`) and a link to the view shown;
* the tabs, in the order of :data:`~opslib.panel.view_state.TABS`, each title
  with the queue's count of that state: **waiting** (on ``jobs``, not read
  yet, and parked by a pause: Cancel), **running** (delivered, not acknowledged: Cancel),
  **delayed** (Run now, Cancel delayed), **dead** (the dead-letter panel,
  :mod:`opslib.panel.widgets`: groups, Replay, Discard, CSV), **archived**
  (the archive's entries and what became of them: Replay archived) and
  **flow** (a chart per kind, and per queue when the flow has one, over a
  chosen window: :mod:`opslib.panel.flow_chart`). Each tab of jobs has its
  filters and a count that follows them (:mod:`opslib.panel.job_tab`);
* the view (tab, filters, selection, window) is in the page's URL: under
  Voilà each change writes it into the address bar (``history.replaceState``,
  no reload), and everywhere into the "Link to this view" link, and a page opened with such
  a query string (Voilà gives it to the kernel as ``QUERY_STRING``) opens
  that view (:mod:`opslib.panel.view_state`). A link never carries Voilà's
  token.

A tab reads the queue when it is shown (and on its Reload). Every string from
the queue reaches the page escaped or as a widget's plain-text value.
"""

from __future__ import annotations

import json
import os
from typing import Any

import ipywidgets as w
import redis
from IPython.display import Javascript

from opslib.display import escape_html
from opslib.errors import OpslibError
from opslib.panel.flow_chart import FlowTab
from opslib.panel.job_tab import JobTab
from opslib.panel.pause_control import PauseControl
from opslib.panel.tab_actions import SPECS
from opslib.panel.view_state import TABS, ViewState, parse_view, view_query
from opslib.panel.widgets import DeadLetterPanel
from opslib.queries import queue_stats

#: Each tab's title and the ``queue_stats()`` count shown beside it.
TITLES = {
    "waiting": ("Waiting", "lag"),
    "running": ("Running", "pending"),
    "delayed": ("Delayed", "delayed"),
    "dead": ("Dead", "dead"),
    "archived": ("Archived", ""),
    "flow": ("Flow", ""),
}
LINK_STYLE = "color:#1a5fb4;text-decoration:underline"


class Dashboard:
    """The tabs, the kind control and the view's URL (``.widget`` is the box to display)."""

    def __init__(self, client: redis.Redis | None = None, prefix: str | None = None, query: str | None = None) -> None:
        self.at: dict[str, Any] = {"client": client, "prefix": prefix}
        self._opening = True
        self.kind_control = PauseControl(self.at)
        self.jobs = {name: JobTab(spec, self.at, self.changed) for name, spec in SPECS.items()}
        self.dead = DeadLetterPanel(client, prefix, controls=False)
        self.flow = FlowTab(self.at, self.changed)
        parts = {**{name: tab.box for name, tab in self.jobs.items()}, "dead": self.dead.widget, "flow": self.flow.box}
        self.tabs = w.Tab(children=[parts[name] for name in TABS])
        self.link, self.notice, self.script = w.HTML(), w.HTML(), w.Output()
        self.link.add_class("opslib-view-link")
        self.notice.add_class("opslib-view-notice")
        for control in (self.dead.kind, self.dead.search, self.dead.since, self.dead.until):
            control.observe(lambda _change: self.changed(), names="value")
        self.dead.group.observe(lambda _change: self.changed(), names="value")
        self.dead.entries.observe(lambda _change: self.changed(), names="value")
        self.tabs.observe(lambda _change: self._tab_chosen(), names="selected_index")
        head = w.HTML("<h3>Stagedoor jobs</h3>")
        self.widget = w.VBox([head, self.kind_control.box, self.notice, self.link, self.tabs, self.script])
        view, problems = parse_view(os.environ.get("QUERY_STRING", "") if query is None else query)
        self.notice.value = "".join(f'<p style="color:#b00020">{escape_html(line)}</p>' for line in problems)
        self.show_view(view)

    @property
    def tab(self) -> str:
        return TABS[self.tabs.selected_index or 0]

    def titles(self) -> None:
        """Each tab's title with the queue's count of its state (the counts of every partition)."""
        try:
            counts = queue_stats(**self.at).counts["value"].to_dict()
        except OpslibError:
            counts = {}
        if "lag" in counts and "parked" in self.kind_control.known:  # waiting: undelivered, and parked by a pause
            counts["lag"] += int(self.kind_control.known["parked"].sum())
        self.tabs.titles = tuple(
            f"{title} {int(counts[metric]):,}" if metric in counts else title
            for title, metric in (TITLES[name] for name in TABS)
        )

    def load(self) -> None:
        """Read the shown tab, the kind control and the titles again."""
        self.kind_control.load()
        self.titles()
        if self.tab in self.jobs:
            self.jobs[self.tab].load()
        elif self.tab == "dead":
            self.dead.load()
        else:
            self.flow.load()

    def _tab_chosen(self) -> None:
        if self._opening:
            return
        self.load()
        self.changed()

    def view(self) -> ViewState:
        """The view shown now."""
        if self.tab in self.jobs:
            return ViewState(tab=self.tab, **self.jobs[self.tab].view())
        if self.tab == "flow":
            return ViewState(tab="flow", window=str(self.flow.window.value))
        panel = self.dead
        filters = {"kind": panel.kind.value or "", "search": panel.search.value}
        times = {"since": panel.since.value, "until": panel.until.value, "group": panel.group.value or ""}
        return ViewState(tab="dead", **filters, **times, selected=tuple(panel.entries.value))

    def changed(self) -> None:
        """Write the view into the link and the page's address bar (nothing while a view is being opened)."""
        if self._opening:
            return
        query = view_query(self.view())
        self.link.value = f'<a href="?{escape_html(query)}" target="_blank" style="{LINK_STYLE}">Link to this view</a>'
        if os.environ.get("SERVER_SOFTWARE", "").startswith("voila/"):  # JupyterLab's address is its own
            self.script.outputs = ()
            replace = f"window.history.replaceState(null, '', '?' + {json.dumps(query)});"
            self.script.append_display_data(Javascript(replace))

    def show_view(self, view: ViewState) -> None:
        """Open ``view``: its tab, read, then its filters and its selection (what is not there is left out)."""
        self._opening = True
        try:
            self.tabs.selected_index = TABS.index(view.tab)
            self.load()
            if view.tab in self.jobs:
                self.jobs[view.tab].show_view(view)
            elif view.tab == "flow":
                self.flow.window.value = view.window
            else:
                self._show_dead(view)
        finally:
            self._opening = False
        self.changed()

    def _show_dead(self, view: ViewState) -> None:
        panel = self.dead
        kinds = [value for _label, value in panel.kind.options]
        panel.kind.value = view.kind if view.kind in kinds else panel.kind.value
        panel.search.value, panel.since.value, panel.until.value = view.search, view.since, view.until
        groups = [value for _label, value in panel.group.options]
        if view.group in groups:
            panel.group.value = view.group
        listed = {value for _label, value in panel.entries.options}
        panel.entries.value = tuple(entry for entry in view.selected if entry in listed)


def dashboard(*, client: redis.Redis | None = None, prefix: str | None = None, query: str | None = None) -> w.VBox:
    """The dashboard: display it in a notebook or serve it with Voilà (``query``: a view's query string;
    None: the page's, from ``QUERY_STRING``)."""
    return Dashboard(client, prefix, query).widget
