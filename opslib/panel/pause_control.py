"""The panel's Pause / Resume / Throttle control: hold or slow a kind while a fix is made, from the notebook.

A row of widgets under the panel's header: the kinds (``opslib.kinds()``),
a reason, Pause and Resume, a rate and Throttle, and lines saying what is
paused (since, by whom, why, how many jobs wait) and what is throttled. Pause
and a throttle need a reason; an empty rate lifts the throttle. Each click is
one ``opslib.pause``, ``opslib.resume`` or ``opslib.throttle`` call, recorded
in ``opslib.actions()`` like every other action. Text from the queue is
HTML-escaped, and the kinds' labels in the dropdown (plain text) show their
control and bidi characters as escapes.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as w
import pandas as pd

from opslib.display import escape_html, local_time, plural
from opslib.errors import OpslibError
from opslib.kinds import kinds
from opslib.moves.incident import pause, resume, throttle
from opslib.panel.html import error_html
from worker.printable import printable


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


def throttled_html(known: pd.DataFrame) -> str:
    """One line naming each throttled kind and its rate (escaped), or "" when none is."""
    rates = known["throttle_per_s"].dropna()
    if rates.empty:
        return ""
    listed = ", ".join(f"<b>{escape_html(str(kind))}</b> at most {rate:g}/s" for kind, rate in rates.items())
    return f"<br><span class='opslib-throttled'>throttled: {listed}</span>"


class PauseControl:
    """Pause and resume a kind (``.box`` is what the panel shows)."""

    def __init__(self, at: dict[str, Any]) -> None:
        self.at = at
        self.kind = w.Dropdown(description="Kind")
        self.reason = w.Text(description="Reason", placeholder="why the kind must wait (required to pause)")
        self.pause_button = w.Button(description="Pause", button_style="warning", icon="pause")
        self.resume_button = w.Button(description="Resume", button_style="success", icon="play")
        self.rate = w.Text(description="Rate /s", placeholder="empty: lift", layout=w.Layout(width="160px"))
        self.throttle_button = w.Button(description="Throttle", icon="tachometer")
        self.state, self.message = w.HTML(), w.HTML()
        self.known = pd.DataFrame()  # the last kinds() read (the dashboard counts the parked jobs in it)
        self.pause_button.on_click(lambda _button: self._act(self._pause))
        self.resume_button.on_click(lambda _button: self._act(self._resume))
        self.throttle_button.on_click(lambda _button: self._act(self._throttle))
        buttons = [self.pause_button, self.resume_button, self.rate, self.throttle_button]
        self.box = w.VBox([w.HBox([self.kind, self.reason, *buttons]), self.state, self.message])
        self.box.add_class("opslib-pause")

    def load(self) -> None:
        """Read the kinds again: the dropdown's choices and the paused line."""
        self.known = known = kinds(**self.at)
        chosen = self.kind.value
        self.kind.options = [(printable(str(kind)) or "(none)", kind) for kind in known.index]  # labels: plain text
        if chosen in known.index:
            self.kind.value = chosen
        self.state.value = paused_html(known) + throttled_html(known)

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

    def _throttle(self) -> None:
        typed = self.rate.value.strip()
        try:
            rate = float(typed) if typed else None
        except ValueError:
            raise OpslibError(
                f"Rate {typed!r} is not a number; type jobs per second such as 10 or 0.5, or leave "
                "it empty to lift the throttle"
            ) from None
        throttle(str(self.kind.value or ""), rate, reason=self.reason.value or None, **self.at)
        per = f"at most {rate:g}/s" if rate is not None else "no longer throttled"
        self.message.value = escape_html(f"{self.kind.value}: {per}")
        self.reason.value = self.rate.value = ""
