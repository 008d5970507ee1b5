"""The panel's Cancel control: stop a running job from the notebook (``opslib.cancel``).

A row of widgets under the Pause / Resume control: the running jobs (the
entries pending to a worker, ``opslib.pending()``: kind, job id, worker), a
reason, and Cancel job. A cancel needs a reason; each click is one
``opslib.cancel`` call, recorded in ``opslib.actions()``, and the line under
the row says what became of the job (cancelled, or finished meanwhile). Text
from the queue is HTML-escaped.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w

from opslib.errors import OpslibError
from opslib.moves.cancel import cancel
from opslib.panel.html import error_html
from opslib.queries import pending

#: The running jobs listed at most.
LISTED = 200


class CancelControl:
    """Cancel a running job (``.box`` is what the panel shows)."""

    def __init__(self, at: dict[str, Any]) -> None:
        self.at = at
        self.job = w.Dropdown(description="Running")
        self.reason = w.Text(description="Reason", placeholder="why the job must stop (required)")
        self.cancel_button = w.Button(description="Cancel job", button_style="danger", icon="stop")
        self.message = w.HTML()
        self.cancel_button.on_click(lambda _button: self._cancel())
        self.box = w.VBox([w.HBox([self.job, self.reason, self.cancel_button]), self.message])
        self.box.add_class("opslib-cancel")

    def load(self) -> None:
        """Read the running jobs again (the dropdown's choices: ``kind job_id on worker``, the job id)."""
        running = pending(**self.at).head(LISTED)
        chosen = self.job.value
        self.job.options = [
            (f"{row.kind} {row.job_id} on {row.consumer}", row.job_id or entry_id)
            for entry_id, row in zip(running.index, running.itertuples(), strict=True)
        ]
        values = [value for _label, value in self.job.options]
        if values:
            self.job.value = chosen if chosen in values else values[0]
        self.cancel_button.disabled = not self.job.options

    def _cancel(self) -> None:
        self.message.value = ""
        try:
            done = cancel(str(self.job.value or ""), reason=self.reason.value, **self.at)
        except OpslibError as exc:
            self.message.value = error_html(exc)
            return
        row = done.iloc[0]
        self.message.value = html.escape(f"{row['kind']} {row['job_id']}: {row['status']}")
        self.reason.value = ""
        self.load()
