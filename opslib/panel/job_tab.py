"""One tab of the dashboard listing jobs in one state: its filters, its count, its list and its actions.

The filters (Kind, Queue when the jobs carry one, Search, From, To) are read
as the dead-letter panel reads its own (:func:`opslib.panel.filters.read_filters`);
the count says how many jobs the filters keep out of how many the tab holds;
an action takes the selected jobs, asks first (with a warning when they go
back to a paused kind), and says what it did. A filter that is not one
clears the list and says why, so no list stands under an error. List labels
are plain text (``printable``); everything else reaches the page escaped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ipywidgets as w
import pandas as pd

from opslib.display import cut, escape_html, local_time, plural
from opslib.errors import OpslibError
from opslib.operator import check_reason
from opslib.panel.filters import ALL_KINDS, read_filters
from opslib.panel.html import error_html
from opslib.panel.state_reads import LISTED, filter_listing
from opslib.panel.tab_actions import TabAction, TabSpec, paused_warning, question_html, result_html
from opslib.panel.view_state import ViewState
from worker.printable import printable

ROWS = 12
LABEL_CHARS = 160
ALL_QUEUES = ""


class JobTab:
    """A tab of jobs in one state (``.box`` is the tab's content; ``on_change`` is called when its view changes)."""

    def __init__(self, spec: TabSpec, at: dict[str, Any], on_change: Callable[[], None]) -> None:
        self.spec, self.at, self.on_change = spec, at, on_change
        self.rows = self.shown = pd.DataFrame()
        self.read_error = ""
        self.kind = w.Dropdown(description="Kind", options=[("all kinds", ALL_KINDS)])
        self.queue = w.Dropdown(description="Queue", options=[("all queues", ALL_QUEUES)])
        self.queue.layout.display = "none"
        self.search = w.Text(description="Search", placeholder="ids, kinds, payloads", continuous_update=False)
        self.since = w.Text(description="From", placeholder="2h, 3d or 2026-11-30 21:00", continuous_update=False)
        self.until = w.Text(description="To", placeholder="empty: now", continuous_update=False)
        self.count, self.message, self.result, self.question = w.HTML(), w.HTML(), w.HTML(), w.HTML()
        self.jobs = w.SelectMultiple(description="Jobs", rows=ROWS, layout=w.Layout(width="95%"))
        self.reason = w.Text(description="Reason", placeholder="why (required to cancel)")
        self.buttons = [w.Button(description=a.label, button_style=a.style, disabled=True) for a in spec.actions]
        self.confirm = w.Button(description="Confirm", button_style="danger")
        self.asking = w.HBox([self.question, self.confirm], layout=w.Layout(display="none"))
        self.reload = w.Button(description="Reload", icon="refresh")
        self.action: TabAction | None = None
        self._settling = False
        for control in (self.kind, self.queue, self.search, self.since, self.until):
            control.observe(self._changed(self.apply), names="value")
        self.jobs.observe(self._changed(self._chosen), names="value")
        for button, action in zip(self.buttons, spec.actions, strict=True):
            button.on_click(lambda _b, action=action: self._guarded(lambda: self._ask(action)))
        self.confirm.on_click(lambda _b: self._guarded(self._act))
        self.reload.on_click(lambda _b: self.load())
        filters = w.HBox([self.kind, self.queue, self.search, self.since, self.until]).add_class("opslib-tab-filters")
        self.count.add_class("opslib-tab-count")
        self.message.add_class("opslib-tab-message")
        self.result.add_class("opslib-tab-result")
        actions = w.HBox([*self.buttons, self.reason]).add_class("opslib-tab-actions")
        parts = [w.HBox([self.count, self.reload]), filters, self.message, self.jobs, actions, self.asking, self.result]
        self.box = w.VBox(parts).add_class(f"opslib-tab-{spec.name}")

    def _changed(self, action: Callable[[], None]) -> Callable[[object], None]:
        def observer(_change: object) -> None:
            if not self._settling:
                action()
                self.on_change()

        return observer

    def _guarded(self, action: Callable[[], None]) -> None:
        self.message.value = ""
        try:
            action()
        except OpslibError as exc:
            self.message.value = error_html(exc)

    def load(self) -> None:
        """Read the tab's jobs again, keep the filters and the selection, and apply them."""
        try:
            self.rows, self.read_error = self.spec.read(**self.at), ""
        except OpslibError as exc:  # e.g. the archive is off or away: the line stays until a read succeeds
            self.rows, self.read_error = pd.DataFrame(), error_html(exc)
        self._settling = True
        try:
            kinds = sorted(set(self.rows["kind"])) if not self.rows.empty else []
            self.kind.options = [("all kinds", ALL_KINDS), *[(printable(k) or "(none)", k) for k in kinds]]
            queues = sorted(set(self.rows["queue"])) if "queue" in self.rows else []
            self.queue.options = [("all queues", ALL_QUEUES), *[(printable(q) or "(none)", q) for q in queues]]
            self.queue.layout.display = "flex" if "queue" in self.rows else "none"
        finally:
            self._settling = False
        self.apply()

    def apply(self) -> None:
        """Keep the jobs the filters keep; a bad filter empties the list and says why."""
        try:
            filters = read_filters(self.kind.value or ALL_KINDS, self.search.value, self.since.value, self.until.value)
        except OpslibError as exc:
            self.shown = self.rows.iloc[0:0]
            self._fill()
            self.count.value = f"<p>no {escape_html(self.spec.nouns)} shown: the filter is not one</p>"
            self.message.value = error_html(exc)
            return
        self.message.value = self.read_error
        self.shown = filter_listing(self.rows, filters, self.queue.value or ALL_QUEUES)
        self._fill()
        total = plural(len(self.rows), self.spec.noun, self.spec.nouns)
        capped = f" (a tab reads at most {LISTED:,})" if len(self.rows) >= LISTED else ""
        self.count.value = f"<p><b>{len(self.shown):,}</b> of {escape_html(total)} match the filters{capped}</p>"

    def _fill(self) -> None:
        options = [(self._label(str(job), row), str(job)) for job, row in self.shown.iterrows()]
        kept = tuple(value for value in self.jobs.value if value in self.shown.index)
        self._settling = True
        try:
            self.jobs.options, self.jobs.value = options, kept
        finally:
            self._settling = False
        self._chosen()

    def _label(self, job: str, row: pd.Series) -> str:
        line = f"{job} · {self.spec.at_label} {local_time(row['at'])} · {row['kind'] or '(none)'} · {row['detail']}"
        return printable(cut(line, LABEL_CHARS))

    def _chosen(self) -> None:
        for button in self.buttons:
            button.disabled = not self.jobs.value
        self.asking.layout.display = "none"

    def _ask(self, action: TabAction) -> None:
        chosen = list(self.jobs.value)
        reason = check_reason(self.reason.value, "cancel") if action.needs_reason else self.reason.value.strip()
        names = sorted(set(self.shown.loc[chosen, "kind"])) if action.into_kind else []
        warning = paused_warning(names, self.at) if names else ""
        self.question.value = question_html(action, len(chosen), self.spec, reason, warning)
        self.action, self.confirm.description = action, f"Confirm {action.label.lower()}"
        self.asking.layout.display = "flex"

    def _act(self) -> None:
        self.asking.layout.display = "none"
        if self.action is None:
            return
        done = self.action.run(list(self.jobs.value), self.reason.value, self.at)
        self.result.value = result_html(done)
        self.reason.value = ""
        self.load()
        self.on_change()

    def view(self) -> dict[str, Any]:
        """The tab's part of the view: its filters and its selection."""
        return {
            "kind": self.kind.value or "",
            "queue": self.queue.value or "",
            "search": self.search.value,
            "since": self.since.value,
            "until": self.until.value,
            "selected": tuple(self.jobs.value),
        }

    def show_view(self, view: ViewState) -> None:
        """Set the filters and the selection of ``view`` (a kind or a job not listed is dropped), then apply."""
        self._settling = True
        try:
            known = [value for _label, value in self.kind.options]
            self.kind.value = view.kind if view.kind in known else ALL_KINDS
            queues = [value for _label, value in self.queue.options]
            self.queue.value = view.queue if view.queue in queues else ALL_QUEUES
            self.search.value, self.since.value, self.until.value = view.search, view.since, view.until
        finally:
            self._settling = False
        self.apply()
        self._settling = True
        try:
            self.jobs.value = tuple(job for job in view.selected if job in self.shown.index)
        finally:
            self._settling = False
        self._chosen()
