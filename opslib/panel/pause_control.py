"""The panel's Pause / Resume control: hold a kind while a fix is made, from the notebook.

A row of widgets under the panel's header: the kinds (``opslib.kinds()``),
a reason, Pause and Resume, and one line saying what is paused (since, by
whom, why, how many jobs wait). Pause needs a reason; each click is one
``opslib.pause`` or ``opslib.resume`` call, recorded in ``opslib.actions()``
like every other action. Text from the queue is HTML-escaped.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as w
import pandas as pd

from opslib.display import escape_html, local_time, plural
from opslib.errors import OpslibError
from opslib.kinds import kinds
from opslib.moves.incident import pause, resume
from opslib.panel.html import error_html


def paused_html(known: pd.DataFrame) -> str:
    """One line per paused kind (escaped), or "no kind is paused"."""
    held = known[known["paused"]]
    if held.empty:
        return "<span class='opslib-paused'>no kind is paused</span>"
    lines = [
        f"<b>{escape_html(str(kind))}</b> paused since {escape_html(local_time(row['paused_since']))} by "
        f"{escape_html(str(row['paused_by']))} ({escape_html(str(row['paused_reason']))}); "
        f"{plural(int(row['parked']), 'job')} {'waits' if int(row['parked']) == 1 else 'wait'}"
        for kind, row in held.iterrows()
    ]
    return "<span class='opslib-paused'>" + "<br>".join(lines) + "</span>"


class PauseControl:
    """Pause and resume a kind (``.box`` is what the panel shows)."""

    def __init__(self, at: dict[str, Any]) -> None:
        self.at = at
        self.kind = w.Dropdown(description="Kind")
        self.reason = w.Text(description="Reason", placeholder="why the kind must wait (required to pause)")
        self.pause_button = w.Button(description="Pause", button_style="warning", icon="pause")
        self.resume_button = w.Button(description="Resume", button_style="success", icon="play")
        self.state, self.message = w.HTML(), w.HTML()
        self.pause_button.on_click(lambda _button: self._act(self._pause))
        self.resume_button.on_click(lambda _button: self._act(self._resume))
        self.box = w.VBox(
            [w.HBox([self.kind, self.reason, self.pause_button, self.resume_button]), self.state, self.message]
        )
        self.box.add_class("opslib-pause")

    def load(self) -> None:
        """Read the kinds again: the dropdown's choices and the paused line."""
        known = kinds(**self.at)
        chosen = self.kind.value
        self.kind.options = list(known.index)
        if chosen in self.kind.options:
            self.kind.value = chosen
        self.state.value = paused_html(known)

    def _act(self, action: Any) -> None:
        self.message.value = ""
        try:
            action()
            self.load()
        except OpslibError as exc:
            self.message.value = error_html(exc)

    def _pause(self) -> None:
        pause(str(self.kind.value or ""), reason=self.reason.value, **self.at)
        self.reason.value = ""

    def _resume(self) -> None:
        done = resume(str(self.kind.value or ""), reason=self.reason.value or None, **self.at)
        back = int(done.loc[0, "entries"])
        self.message.value = f"resumed: {plural(back, 'waiting job')} {'is' if back == 1 else 'are'} back on the queue"
        self.reason.value = ""
