"""The dead-letter panel for notebooks (and Voilà): see, choose, preview, replay or discard, follow.

``dead_letter_panel(client=None, prefix=None)`` returns an ipywidgets box:
the queue's counts, the failure groups table, a kind and a group selector, a
preview of exactly the entries a replay or a discard would take, a Replay
button and, beside it, a Discard button with its reason field (a discard
needs a reason); each asks for confirmation, then shows a progress bar and
its result; a replay's status follows (with a button to refresh it).

Every untrusted string (errors, tracebacks, payload fields and their names,
kinds) reaches the page either as a widget's plain-text value (dropdown
labels, which the browser shows as text) or through :func:`html.escape` /
``DataFrame.to_html(escape=True)`` in the ``*_html`` functions below, never
as raw HTML.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w
import pandas as pd
import redis

from opslib.discard import check_reason, discard
from opslib.errors import OpslibError
from opslib.frames import DEAD_COLUMNS, select_dead
from opslib.queries import QueueStats, dead_letters, failure_groups, queue_stats
from opslib.replay import replay, replay_status
from worker.vocabulary import REPLAY_MISSING, REPLAY_REPLAYED, STATUS_SUCCEEDED

PREVIEW_ROWS = 20
"""The preview shows this many entries (the replay takes all of them)."""
LABEL_CHARS = 90
ALL_KINDS = ""


def counts_html(stats: QueueStats) -> str:
    parts = [
        f"<b>{stats.dead}</b> dead letters",
        f"{stats.dead_evicted} evicted by the cap",
        f"{stats.pending} pending",
        f"{stats.delayed} delayed ({stats.delayed_due} due)",
        f"lag {stats.lag}",
        f"{len(stats.consumers)} consumers",
    ]
    return "<p>" + " · ".join(parts) + "</p>"


def table_html(frame: pd.DataFrame, max_chars: int = 120) -> str:
    """A frame as an HTML table, every cell and header escaped, long text cut."""
    shown = frame.copy()
    for name in shown.columns:
        if shown[name].dtype == "str":
            shown[name] = shown[name].str.slice(0, max_chars)
    return shown.to_html(escape=True, index=False, border=0, na_rep="", classes="opslib-table")


def groups_html(groups: pd.DataFrame) -> str:
    if groups.empty:
        return "<p>No dead letters.</p>"
    return table_html(groups[["count", "kinds", "error_type", "signature", "last_seen"]])


def preview_html(dead: pd.DataFrame) -> str:
    """The entries a replay would take: how many, and the first :data:`PREVIEW_ROWS`."""
    if dead.empty:
        return "<p>No dead letters match: nothing to replay.</p>"
    fixed = ["dead_at", "kind", "job_id", "outbox_id", "attempts", "error"]
    payload = [name for name in dead.columns if name not in DEAD_COLUMNS]
    shown = dead.head(PREVIEW_ROWS).reset_index()[["dead_id", *fixed, *payload]]
    more = f" (showing the first {PREVIEW_ROWS})" if len(dead) > PREVIEW_ROWS else ""
    return f"<p>A replay would take <b>{len(dead)}</b> entries{more}:</p>" + table_html(shown, max_chars=80)


def result_html(done: pd.DataFrame) -> str:
    counts = done["status"].value_counts()
    batch = html.escape(str(done.attrs.get("batch", "")))
    return (
        f"<p>Replayed <b>{counts.get(REPLAY_REPLAYED, 0)}</b> of {len(done)}"
        f" ({counts.get(REPLAY_MISSING, 0)} missing: taken by someone else since) · batch <code>{batch}</code></p>"
    )


def discard_result_html(done: pd.DataFrame) -> str:
    counts = done["status"].value_counts()
    batch = html.escape(str(done.attrs.get("batch", "")))
    return (
        f"<p>Discarded <b>{counts.get('discarded', 0)}</b> of {len(done)}"
        f" ({counts.get('missing', 0)} missing: taken by someone else since) · batch <code>{batch}</code></p>"
    )


def status_html(status: pd.DataFrame) -> str:
    counts = status["status"].value_counts()
    summary = ", ".join(f"{html.escape(str(name))}: <b>{count}</b>" for name, count in counts.items())
    unfinished = status[status["status"] != STATUS_SUCCEEDED]
    details = table_html(unfinished.drop(columns=["batch"]).head(PREVIEW_ROWS)) if len(unfinished) else ""
    return f"<p>Status: {summary}</p>{details}"


def error_html(exc: Exception) -> str:
    return f'<p style="color:#b00020">{html.escape(str(exc))}</p>'


class DeadLetterPanel:
    """The widgets of the panel and what their buttons do (``.widget`` is the box to display)."""

    def __init__(self, client: redis.Redis | None = None, prefix: str | None = None) -> None:
        self.at: dict[str, Any] = {"client": client, "prefix": prefix}
        self.dead = pd.DataFrame()
        self.groups = pd.DataFrame()
        self.taken = pd.DataFrame()
        self.counts = w.HTML()
        self.table = w.HTML()
        self.kind = w.Dropdown(description="Kind")
        self.group = w.Dropdown(description="Group", layout=w.Layout(width="95%"))
        self.preview = w.HTML()
        self.reload = w.Button(description="Reload", icon="refresh")
        self.replay_button = w.Button(description="Replay…", button_style="warning", disabled=True)
        self.discard_button = w.Button(description="Discard…", button_style="danger", disabled=True)
        self.reason = w.Text(description="Reason", placeholder="why these jobs must never run (required)")
        self.question = w.HTML()
        self.confirm = w.Button(description="Confirm replay", button_style="danger")
        self.action = "replay"
        self.cancel = w.Button(description="Cancel")
        self.asking = w.HBox([self.question, self.confirm, self.cancel], layout=w.Layout(display="none"))
        self.progress = w.IntProgress(min=0, max=1, value=0, layout=w.Layout(display="none"))
        self.result = w.HTML()
        self.status = w.HTML()
        self.refresh_status = w.Button(description="Refresh status", layout=w.Layout(display="none"))
        self.message = w.HTML()
        self.batch = ""
        for widget, name in (
            (self.counts, "opslib-counts"),
            (self.table, "opslib-groups"),
            (self.preview, "opslib-preview"),
            (self.result, "opslib-result"),
            (self.status, "opslib-status"),
            (self.message, "opslib-message"),
        ):
            widget.add_class(name)
        self.kind.observe(self._kind_chosen, names="value")
        self.group.observe(self._group_chosen, names="value")
        self.reload.on_click(lambda _button: self.load())
        self.replay_button.on_click(self._ask)
        self.discard_button.on_click(self._ask_discard)
        self.cancel.on_click(self._cancel)
        self.confirm.on_click(self._confirmed)
        self.refresh_status.on_click(lambda _button: self._show_status())
        self.widget = w.VBox(
            [
                w.HTML("<h3>Dead letters</h3>"),
                w.HBox([self.counts, self.reload]),
                self.table,
                self.kind,
                self.group,
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
        self.load()

    def _guarded(self, action: Any) -> None:
        self.message.value = ""
        try:
            action()
        except OpslibError as exc:
            self.message.value = error_html(exc)

    def load(self) -> None:
        """Read the counts, the dead letters and their groups again."""

        def read() -> None:
            self.counts.value = counts_html(queue_stats(**self.at))
            self.dead = dead_letters(**self.at)
            self.groups = failure_groups(self.dead)
            self.table.value = groups_html(self.groups)
            kinds = sorted(set(self.dead["kind"]))
            self.kind.options = [("all kinds", ALL_KINDS), *[(kind or "(none)", kind) for kind in kinds]]
            self.kind.value = ALL_KINDS
            self._kind_chosen()

        self._guarded(read)

    def _kind_chosen(self, _change: object = None) -> None:
        groups = self.groups
        if self.kind.value != ALL_KINDS and not groups.empty:
            in_kind = self.dead[self.dead["kind"] == self.kind.value]
            groups = failure_groups(in_kind)
        self.group.options = [
            (f"{count} × {signature[:LABEL_CHARS]}", signature)
            for count, signature in zip(groups.get("count", []), groups.get("signature", []), strict=True)
        ]
        self.group.value = self.group.options[0][1] if self.group.options else None
        self._group_chosen()

    def _group_chosen(self, _change: object = None) -> None:
        dead = self.dead
        if dead.empty or self.group.value is None:
            self.taken = dead.iloc[0:0]
        else:
            mask = dead["signature"] == self.group.value
            if self.kind.value != ALL_KINDS:
                mask &= dead["kind"] == self.kind.value
            self.taken = select_dead(dead, mask)
        self.preview.value = preview_html(self.taken)
        self.replay_button.disabled = self.taken.empty
        self.discard_button.disabled = self.taken.empty
        self.asking.layout.display = "none"

    def _ask(self, _button: object) -> None:
        kind = html.escape(str(self.kind.value or "every kind"))
        signature = html.escape(str(self.group.value))
        self.question.value = (
            f"<b>Replay {len(self.taken)} dead letters</b> of {kind} with the error <code>{signature}</code>?"
        )
        self.action, self.confirm.description = "replay", "Confirm replay"
        self.asking.layout.display = "flex"

    def _ask_discard(self, _button: object) -> None:
        def ask() -> None:
            reason = html.escape(check_reason(self.reason.value))
            kind = html.escape(str(self.kind.value or "every kind"))
            signature = html.escape(str(self.group.value))
            self.question.value = (
                f"<b>Discard {len(self.taken)} dead letters</b> of {kind} with the error <code>{signature}</code>"
                f" for good, because: <i>{reason}</i>?"
            )
            self.action, self.confirm.description = "discard", "Confirm discard"
            self.asking.layout.display = "flex"

        self._guarded(ask)

    def _confirmed(self, button: object) -> None:
        if self.action == "discard":
            self._discard(button)
        else:
            self._replay(button)

    def _cancel(self, _button: object) -> None:
        self.asking.layout.display = "none"

    def _replay(self, _button: object) -> None:
        self.asking.layout.display = "none"
        self.replay_button.disabled = True
        self.progress.max, self.progress.value = max(1, len(self.taken)), 0
        self.progress.layout.display = "flex"

        def run() -> None:
            done = replay(self.taken, on_progress=self._progressed, **self.at)
            self.batch = done.attrs["batch"]
            self.result.value = result_html(done)
            self.refresh_status.layout.display = "flex"
            self._show_status()
            self.load()

        self._guarded(run)

    def _discard(self, _button: object) -> None:
        self.asking.layout.display = "none"
        self.discard_button.disabled = True
        self.progress.max, self.progress.value = max(1, len(self.taken)), 0
        self.progress.layout.display = "flex"

        def run() -> None:
            done = discard(self.taken, reason=self.reason.value, on_progress=self._progressed, **self.at)
            self.result.value = discard_result_html(done)
            self.reason.value = ""
            self.load()

        self._guarded(run)

    def _progressed(self, done: int, total: int) -> None:
        self.progress.max, self.progress.value = total, done

    def _show_status(self) -> None:
        if self.batch:
            self._guarded(lambda: setattr(self.status, "value", status_html(replay_status(self.batch, **self.at))))


def dead_letter_panel(*, client: redis.Redis | None = None, prefix: str | None = None) -> w.VBox:
    """The dead-letter panel: display it in a notebook (it reads the queue when made)."""
    return DeadLetterPanel(client, prefix).widget
