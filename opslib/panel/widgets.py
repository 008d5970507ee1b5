"""The dead-letter panel for notebooks (and Voilà): find, read, choose, preview, replay or discard, follow.

``dead_letter_panel(client=None, prefix=None)`` returns an ipywidgets box
(laid out by :mod:`opslib.panel.layout`):

* the queue's counts, a Reload button and an Auto-refresh toggle (every
  :data:`~opslib.panel.layout.AUTO_REFRESH_S` seconds; the filters, the
  group, the page and the selection are kept across a reload); the last
  hour's flow (``throughput()``): jobs succeeded and failed per minute as a
  sparkline, and their sums;
* filters: a kind selector, a text search over the error, the job's ids and
  the payload, and a time range (From / To: ``2h``, ``3d`` or a time in the
  display time zone); the failure groups table shows the groups of the
  entries the filters keep;
* a group selector, then the group's entries newest first, in pages of
  :data:`~opslib.panel.layout.ENTRY_ROWS` (Older / Newer), where single
  rows can be selected; the first selected entry is shown with its error
  and its traceback, line breaks kept;
* right under the list, a Replay button, a Discard button with its reason
  field (a discard needs a reason) and a CSV button (a link that saves the
  entries an action would take); each action asks for confirmation there,
  then shows a progress bar and its result; a replay's status follows (with
  a button to refresh it);
* a preview of exactly the entries an action takes (the selected ones, or the
  whole group when none is selected), newest first as in the list.

What the filters keep and what an action takes is computed by
:mod:`opslib.panel.filters`; every string from the queue reaches the page
through :mod:`opslib.panel.html` (escaped) or as a widget's plain-text value
(dropdown and list labels, which the browser shows as text), never as raw
HTML. Times are shown in the display time zone (``opslib.set_display_tz``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import ipywidgets as w
import pandas as pd
import redis

from opslib.errors import OpslibError
from opslib.flow import throughput
from opslib.moves.discard import discard
from opslib.moves.patch import parsed_patch
from opslib.moves.replay import replay, replay_status
from opslib.operator import check_reason
from opslib.panel.cancel_control import CancelControl
from opslib.panel.filters import (
    ALL_KINDS,
    chosen_rows,
    entry_label,
    filter_dead,
    in_group,
    newest_first,
    read_filters,
)
from opslib.panel.html import (
    counts_html,
    csv_link_html,
    discard_result_html,
    entry_html,
    error_html,
    flow_html,
    groups_html,
    page_html,
    preview_html,
    question_html,
    result_html,
    status_html,
)
from opslib.panel.layout import AUTO_REFRESH_S, ENTRY_ROWS, PanelWidgets
from opslib.panel.pause_control import PauseControl
from opslib.panel.tab_actions import paused_warning
from opslib.panel.ticker import Ticker
from opslib.queries import dead_letters, failure_groups, queue_stats
from worker.printable import printable

LABEL_CHARS = 90
UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class DeadLetterPanel(PanelWidgets):
    """The panel's behaviour: what each filter, list and button does (``.widget`` is the box to display)."""

    def __init__(self, client: redis.Redis | None = None, prefix: str | None = None, *, controls: bool = True) -> None:
        """``controls=False``: without the Pause / Resume and Cancel controls (the dashboard has them elsewhere)."""
        super().__init__()
        self.widget = self.box
        self.at: dict[str, Any] = {"client": client, "prefix": prefix}
        self.pause_control, self.cancel_control = PauseControl(self.at), CancelControl(self.at)
        self.controls = (self.pause_control, self.cancel_control) if controls else ()
        header = 3  # the title, the counts row and the flow line: the Pause / Resume and Cancel controls under them
        boxes = tuple(control.box for control in self.controls)
        self.box.children = (*self.box.children[:header], *boxes, *self.box.children[header:])
        self.dead = self.shown = self.in_group = self.taken = pd.DataFrame()
        self.action, self.batch, self._settling = "replay", "", False
        self.page_at, self.paged_group = 0, None
        self.ticker = Ticker(AUTO_REFRESH_S, self._tick)
        for control in (self.kind, self.search, self.since, self.until):
            control.observe(self._quietly(self.apply_filters), names="value")
        self.group.observe(self._quietly(self._group_chosen), names="value")
        self.entries.observe(self._quietly(self._rows_chosen), names="value")
        self.auto.observe(lambda _change: self._guarded(self._auto_toggled), names="value")
        self.reload.on_click(lambda _button: self.load())
        self.newer.on_click(lambda _button: self._turn(-1))
        self.older.on_click(lambda _button: self._turn(+1))
        self.csv_button.on_click(lambda _button: self._csv())
        self.replay_button.on_click(lambda _button: self._guarded(lambda: self._ask("replay")))
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
            self._guarded(self._read_flow, self.flow)
            for control in self.controls:
                control.load()
            self.dead = dead_letters(**self.at)
            kinds = sorted(set(self.dead["kind"]))
            options = [("all kinds", ALL_KINDS), *[(printable(kind) or "(none)", kind) for kind in kinds]]
            kept = self.kind.value if self.kind.value in kinds else ALL_KINDS
            self._set(self.kind, options=options, value=kept)
            self.apply_filters()

        self._guarded(read)

    def _read_flow(self) -> None:
        """The header's sparkline: the last hour's jobs per minute that succeeded and that died, summed over the
        kinds (retried attempts are not jobs that failed: the flow tab draws them apart)."""
        flow = throughput(freq="1min", since="1h", **self.at)
        self.flow.value = flow_html(flow.groupby("period")[["succeeded", "dead"]].sum().sort_index())

    def apply_filters(self) -> None:
        """Keep the entries of the kind, the search and the time range; their groups fill the table."""

        def apply() -> None:
            try:
                kind = self.kind.value or ALL_KINDS
                filters = read_filters(kind, self.search.value, self.since.value, self.until.value)
            except OpslibError:  # no list under the error: the entries shown would not be the filter's
                self.shown = self.dead.iloc[0:0]
                self.table.value = "<p>No dead letters shown: the filter is not one.</p>"
                self._set(self.group, options=[], value=None)
                self._group_chosen()
                raise
            self.shown = filter_dead(self.dead, filters)
            groups = failure_groups(self.shown) if not self.shown.empty else pd.DataFrame()
            self.table.value = groups_html(groups, filters.kind)
            options = [
                (printable(f"{count} × {signature[:LABEL_CHARS]}"), signature)
                for count, signature in zip(groups.get("count", []), groups.get("signature", []), strict=True)
            ]
            values = [value for _label, value in options]
            kept = self.group.value if self.group.value in values else (values[0] if values else None)
            self._set(self.group, options=options, value=kept)
            self._group_chosen()

        self._guarded(apply, self.filter_message)

    def _group_chosen(self) -> None:
        """Fill the entry list with the group's page (the first when the group changed), keeping the selection."""
        self.in_group = in_group(self.shown, self.group.value)
        if self.group.value != self.paged_group:
            self.page_at, self.paged_group = 0, self.group.value
        total = len(self.in_group)
        self.page_at = max(0, min(self.page_at, (total - 1) // ENTRY_ROWS * ENTRY_ROWS if total else 0))
        page = newest_first(self.in_group).iloc[self.page_at : self.page_at + ENTRY_ROWS]
        options = [(entry_label(str(dead_id), row), str(dead_id)) for dead_id, row in page.iterrows()]
        kept = tuple(value for value in self.entries.value if value in page.index)
        self._set(self.entries, options=options, value=kept)
        self.page.value = page_html(self.page_at + 1, self.page_at + len(page), total)
        self.newer.disabled = self.page_at == 0
        self.older.disabled = self.page_at + ENTRY_ROWS >= total
        self._rows_chosen()

    def _turn(self, pages: int) -> None:
        """Show the next older (+1) or newer (-1) page of the group; the selection is of one page."""
        self.page_at += pages * ENTRY_ROWS
        self._set(self.entries, value=())
        self._group_chosen()

    def _csv(self) -> None:
        """A link saving the entries an action would take (the selected ones, or the whole group)."""
        stamp = pd.Timestamp.now(tz="UTC").strftime("%Y%m%dT%H%M%SZ")
        name = f"dead-letters-{UNSAFE.sub('_', str(self.kind.value or 'all-kinds'))}-{stamp}.csv"
        self.csv.value = csv_link_html(newest_first(self.taken), name)

    def _auto_toggled(self) -> None:
        if not self.auto.value:
            self.ticker.stop()
            return
        try:
            self.ticker.start()
        except OpslibError:
            self._set(self.auto, value=False)
            raise

    def _tick(self) -> None:
        """Auto-refresh: read the queue again, unless a question waits for an answer (what it asks would change)."""
        if self.asking.layout.display == "none":
            self.load()
            self._show_status()

    def _rows_chosen(self) -> None:
        selected = list(self.entries.value)
        self.taken = chosen_rows(self.in_group, selected)
        first = selected[0] if selected else None
        self.entry.value = entry_html(first, self.in_group.loc[first] if first is not None else None)
        self.preview.value = preview_html(self.taken, selected=bool(selected))
        self.replay_button.disabled = self.discard_button.disabled = self.csv_button.disabled = self.taken.empty
        self.csv.value = ""
        self._hide_question()

    def _ask(self, action: str) -> None:
        reason = check_reason(self.reason.value) if action == "discard" else ""
        setting = ", ".join(parsed_patch(self.patch.value)) if action == "replay" else ""
        warning = paused_warning(sorted(set(self.taken["kind"])), self.at) if action == "replay" else ""
        self.question.value = warning + question_html(
            action,
            len(self.taken),
            str(self.kind.value or ""),
            str(self.group.value),
            selected=bool(self.entries.value),
            reason=reason,
            setting=setting,
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
        patch = parsed_patch(self.patch.value)
        done = replay(self.taken, on_progress=self._progressed, patch=patch, **self.at)
        self.patch.value = ""
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
