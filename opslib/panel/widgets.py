"""The dead-letter panel for notebooks (and Voilà): find, read, choose, preview, replay or discard, follow.

``dead_letter_panel(client=None, prefix=None)`` returns an ipywidgets box:

* the queue's counts and a Reload button;
* filters: a kind selector, a text search over the error, the job's ids and
  the payload, and a time range (From / To: ``2h``, ``3d`` or a time in the
  display time zone); the failure groups table shows the groups of the
  entries the filters keep;
* a group selector, then the group's entries (newest first) in a list where
  single rows can be selected; the first selected entry is shown with its
  error and its traceback, line breaks kept;
* a preview of exactly the entries an action takes (the selected ones, or the
  whole group when none is selected), a Replay button and a Discard button
  with its reason field (a discard needs a reason); each asks for
  confirmation, then shows a progress bar and its result; a replay's status
  follows (with a button to refresh it).

What the filters keep and what an action takes is computed by
:mod:`opslib.panel.filters`; every string from the queue reaches the page
through :mod:`opslib.panel.html` (escaped) or as a widget's plain-text value
(dropdown and list labels, which the browser shows as text), never as raw
HTML. Times are shown in the display time zone (``opslib.set_display_tz``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ipywidgets as w
import pandas as pd
import redis

from opslib.errors import OpslibError
from opslib.moves.discard import check_reason, discard
from opslib.moves.replay import replay, replay_status
from opslib.panel.filters import ALL_KINDS, chosen_rows, entry_label, filter_dead, in_group, read_filters
from opslib.panel.html import (
    counts_html,
    discard_result_html,
    entry_html,
    error_html,
    groups_html,
    preview_html,
    question_html,
    result_html,
    status_html,
)
from opslib.queries import dead_letters, failure_groups, queue_stats

LABEL_CHARS = 90
ENTRY_ROWS = 200
"""The entry list holds the group's newest entries up to this many (an action with none selected takes all)."""
CLASSES = {
    "counts": "opslib-counts",
    "table": "opslib-groups",
    "entry": "opslib-entry",
    "preview": "opslib-preview",
    "result": "opslib-result",
    "status": "opslib-status",
    "message": "opslib-message",
    "filter_message": "opslib-filter-message",
}
"""CSS classes of the HTML parts (the browser test finds them by these)."""


class PanelWidgets:
    """The panel's widgets and their layout, without behaviour (``.box`` is what is displayed)."""

    def __init__(self) -> None:
        wide = w.Layout(width="95%")
        self.counts, self.table, self.entry = w.HTML(), w.HTML(), w.HTML()
        self.preview, self.result, self.status = w.HTML(), w.HTML(), w.HTML()
        self.message, self.filter_message = w.HTML(), w.HTML()
        self.reload = w.Button(description="Reload", icon="refresh")
        self.kind = w.Dropdown(description="Kind")
        self.search = w.Text(description="Search", placeholder="in errors and payloads", continuous_update=False)
        self.since = w.Text(description="From", placeholder="2h, 3d or 2026-11-30 21:00", continuous_update=False)
        self.until = w.Text(description="To", placeholder="empty: now", continuous_update=False)
        self.group = w.Dropdown(description="Group", layout=wide)
        self.entries = w.SelectMultiple(description="Entries", rows=8, layout=wide)
        self.replay_button = w.Button(description="Replay…", button_style="warning", disabled=True)
        self.discard_button = w.Button(description="Discard…", button_style="danger", disabled=True)
        self.reason = w.Text(
            description="Reason", placeholder="why these jobs must never run (required)", layout=w.Layout(width="50%")
        )
        self.question = w.HTML()
        self.confirm = w.Button(description="Confirm replay", button_style="danger")
        self.cancel = w.Button(description="Cancel")
        self.asking = w.HBox([self.question, self.confirm, self.cancel], layout=w.Layout(display="none"))
        self.progress = w.IntProgress(min=0, max=1, value=0, layout=w.Layout(display="none"))
        self.refresh_status = w.Button(description="Refresh status", layout=w.Layout(display="none"))
        for name, css in CLASSES.items():
            getattr(self, name).add_class(css)
        self.box = w.VBox(
            [
                w.HTML("<h3>Dead letters</h3>"),
                w.HBox([self.counts, self.reload]),
                w.HBox([self.kind, self.search, self.since, self.until]),
                self.filter_message,
                self.table,
                self.group,
                self.entries,
                self.entry,
                self.preview,
                w.HBox([self.replay_button, self.discard_button, self.reason]),
                self.asking,
                self.progress,
                self.result,
                self.status,
                self.refresh_status,
                self.message,
            ]
        )


class DeadLetterPanel(PanelWidgets):
    """The panel's behaviour: what each filter, list and button does (``.widget`` is the box to display)."""

    def __init__(self, client: redis.Redis | None = None, prefix: str | None = None) -> None:
        super().__init__()
        self.widget = self.box
        self.at: dict[str, Any] = {"client": client, "prefix": prefix}
        self.dead = self.shown = self.in_group = self.taken = pd.DataFrame()
        self.action, self.batch, self._settling = "replay", "", False
        for control in (self.kind, self.search, self.since, self.until):
            control.observe(self._quietly(self.apply_filters), names="value")
        self.group.observe(self._quietly(self._group_chosen), names="value")
        self.entries.observe(self._quietly(self._rows_chosen), names="value")
        self.reload.on_click(lambda _button: self.load())
        self.replay_button.on_click(lambda _button: self._ask("replay"))
        self.discard_button.on_click(lambda _button: self._guarded(lambda: self._ask("discard")))
        self.cancel.on_click(lambda _button: self._hide_question())
        self.confirm.on_click(lambda _button: self._confirmed())
        self.refresh_status.on_click(lambda _button: self._show_status())
        self.load()

    def _quietly(self, action: Callable[[], None]) -> Callable[[object], None]:
        """An observer that runs ``action`` unless the panel itself is setting widgets (one redraw, not many)."""

        def observer(_change: object) -> None:
            if not self._settling:
                action()

        return observer

    def _guarded(self, action: Callable[[], None], message: w.HTML | None = None) -> None:
        shown = message or self.message
        shown.value = ""
        try:
            action()
        except OpslibError as exc:
            shown.value = error_html(exc)

    def _set(self, widget: w.Widget, **values: Any) -> None:
        """Set traits without the observers firing (the caller redraws what follows)."""
        self._settling = True
        try:
            for name, value in values.items():
                setattr(widget, name, value)
        finally:
            self._settling = False

    def load(self) -> None:
        """Read the counts and the dead letters again, then apply the filters."""

        def read() -> None:
            self.counts.value = counts_html(queue_stats(**self.at))
            self.dead = dead_letters(**self.at)
            kinds = sorted(set(self.dead["kind"]))
            options = [("all kinds", ALL_KINDS), *[(kind or "(none)", kind) for kind in kinds]]
            kept = self.kind.value if self.kind.value in kinds else ALL_KINDS
            self._set(self.kind, options=options, value=kept)
            self.apply_filters()

        self._guarded(read)

    def apply_filters(self) -> None:
        """Keep the entries of the kind, the search and the time range; their groups fill the table."""

        def apply() -> None:
            filters = read_filters(self.kind.value or ALL_KINDS, self.search.value, self.since.value, self.until.value)
            self.shown = filter_dead(self.dead, filters)
            groups = failure_groups(self.shown) if not self.shown.empty else pd.DataFrame()
            self.table.value = groups_html(groups, filters.kind)
            options = [
                (f"{count} × {signature[:LABEL_CHARS]}", signature)
                for count, signature in zip(groups.get("count", []), groups.get("signature", []), strict=True)
            ]
            values = [value for _label, value in options]
            kept = self.group.value if self.group.value in values else (values[0] if values else None)
            self._set(self.group, options=options, value=kept)
            self._group_chosen()

        self._guarded(apply, self.filter_message)

    def _group_chosen(self) -> None:
        self.in_group = in_group(self.shown, self.group.value)
        newest = self.in_group.iloc[::-1].head(ENTRY_ROWS)
        options = [(entry_label(str(dead_id), row), str(dead_id)) for dead_id, row in newest.iterrows()]
        self._set(self.entries, options=options, value=())
        self._rows_chosen()

    def _rows_chosen(self) -> None:
        selected = list(self.entries.value)
        self.taken = chosen_rows(self.in_group, selected)
        first = selected[0] if selected else None
        self.entry.value = entry_html(first, self.in_group.loc[first] if first is not None else None)
        self.preview.value = preview_html(self.taken, selected=bool(selected))
        self.replay_button.disabled = self.discard_button.disabled = self.taken.empty
        self._hide_question()

    def _ask(self, action: str) -> None:
        reason = check_reason(self.reason.value) if action == "discard" else ""
        self.question.value = question_html(
            action,
            len(self.taken),
            str(self.kind.value or ""),
            str(self.group.value),
            selected=bool(self.entries.value),
            reason=reason,
        )
        self.action, self.confirm.description = action, f"Confirm {action}"
        self.asking.layout.display = "flex"

    def _hide_question(self) -> None:
        self.asking.layout.display = "none"

    def _confirmed(self) -> None:
        self._hide_question()
        self.replay_button.disabled = self.discard_button.disabled = True
        self.progress.max, self.progress.value = max(1, len(self.taken)), 0
        self.progress.layout.display = "flex"
        self._guarded(self._discard if self.action == "discard" else self._replay)

    def _replay(self) -> None:
        done = replay(self.taken, on_progress=self._progressed, **self.at)
        self.batch = done.attrs["batch"]
        self.result.value = result_html(done)
        self.refresh_status.layout.display = "flex"
        self._show_status()
        self.load()

    def _discard(self) -> None:
        done = discard(self.taken, reason=self.reason.value, on_progress=self._progressed, **self.at)
        self.result.value = discard_result_html(done)
        self.reason.value = ""
        self.load()

    def _progressed(self, done: int, total: int) -> None:
        self.progress.max, self.progress.value = total, done

    def _show_status(self) -> None:
        if self.batch:
            self._guarded(lambda: setattr(self.status, "value", status_html(replay_status(self.batch, **self.at))))


def dead_letter_panel(*, client: redis.Redis | None = None, prefix: str | None = None) -> w.VBox:
    """The dead-letter panel: display it in a notebook (it reads the queue when made)."""
    return DeadLetterPanel(client, prefix).widget
