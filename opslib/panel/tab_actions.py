"""What each tab of the dashboard lists and the actions that fit its jobs, over opslib's operator moves.

Waiting and running jobs can be cancelled (``opslib.cancel``: removed before
they start, or stopped); delayed jobs run now (``opslib.run_now``) or are
cancelled (``opslib.cancel_delayed``); archived entries still dead are
replayed (``opslib.replay``, which re-adds what ``jobs:dead`` no longer holds
from the archive). Each move checks who acts and why through
:class:`opslib.operator.Operator` and is recorded in ``opslib.actions()``, as
from Python. The dead tab is the dead-letter panel (:mod:`opslib.panel.widgets`);
pause and throttle act on a kind and sit above the tabs.

A replay into a paused kind parks its jobs until the kind is resumed:
:func:`paused_warning` says so in the question before the replay is made.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from opslib.display import escape_html, plural
from opslib.kinds import kinds
from opslib.moves.cancel import cancel
from opslib.moves.delayed_jobs import cancel_delayed, run_now
from opslib.moves.replay import replay
from opslib.panel import state_reads

#: An action's call: (the ids chosen, the reason typed, client= and prefix=) -> the move's frame.
Move = Callable[[list[str], str, dict[str, Any]], pd.DataFrame]


@dataclass(frozen=True)
class TabAction:
    """One button of a tab: its label, its style, whether it needs a reason, what it calls."""

    label: str
    style: str
    needs_reason: bool
    run: Move
    into_kind: bool = False
    """True when the jobs go back to their kind's queue (a paused kind then parks them: warned before)."""


@dataclass(frozen=True)
class TabSpec:
    """One tab of jobs: its name, what it lists them as, how it reads them, and its actions."""

    name: str
    noun: str
    read: Callable[..., pd.DataFrame]
    actions: Sequence[TabAction]
    at_label: str

    @property
    def nouns(self) -> str:
        """The noun for many (``archived entries``)."""
        return self.noun[:-1] + "ies" if self.noun.endswith("y") else self.noun + "s"


def _cancel(ids: list[str], reason: str, at: dict[str, Any]) -> pd.DataFrame:
    return cancel(ids, reason=reason, **at)


def _run_now(ids: list[str], _reason: str, at: dict[str, Any]) -> pd.DataFrame:
    return run_now(ids, **at)


def _cancel_delayed(ids: list[str], reason: str, at: dict[str, Any]) -> pd.DataFrame:
    return cancel_delayed(ids, reason=reason, **at)


def _replay(ids: list[str], reason: str, at: dict[str, Any]) -> pd.DataFrame:
    return replay(ids, reason=reason or None, **at)


CANCEL = TabAction("Cancel jobs", "danger", True, _cancel)
SPECS = {
    "waiting": TabSpec("waiting", "waiting job", state_reads.waiting_listing, (CANCEL,), "enqueued"),
    "running": TabSpec("running", "running job", state_reads.running_listing, (CANCEL,), "delivered"),
    "delayed": TabSpec(
        "delayed",
        "delayed job",
        state_reads.delayed_listing,
        (
            TabAction("Run now", "warning", False, _run_now, into_kind=True),
            TabAction("Cancel delayed", "danger", True, _cancel_delayed),
        ),
        "runs at",
    ),
    "archived": TabSpec(
        "archived",
        "archived entry",
        state_reads.archived_listing,
        (TabAction("Replay archived", "warning", False, _replay, into_kind=True),),
        "died",
    ),
}
"""The tabs of jobs, by name (the dead tab is the dead-letter panel)."""


def paused_kinds(names: Sequence[str], at: dict[str, Any]) -> list[str]:
    """Which of ``names`` are paused now (sorted)."""
    known = kinds(**at)
    held = set(known.index[known["paused"]])
    return sorted(set(names) & held)


def paused_warning(names: Sequence[str], at: dict[str, Any]) -> str:
    """The warning (HTML, escaped) that jobs of paused kinds will wait until resumed; "" when none is paused."""
    held = paused_kinds(names, at)
    if not held:
        return ""
    listed = ", ".join(f"<b>{escape_html(kind)}</b>" for kind in held)
    verb = "is" if len(held) == 1 else "are"
    return (
        f'<p class="opslib-paused-warning" style="color:#8a4b00">⚠ {listed} {verb} paused: '
        "these jobs will wait (parked) until resumed.</p>"
    )


def question_html(action: TabAction, count: int, spec: TabSpec, reason: str, warning: str) -> str:
    """The confirmation question of a tab's action on ``count`` chosen jobs (escaped), with its warning."""
    why = f", because: <i>{escape_html(reason)}</i>" if reason else ""
    return f"{warning}<b>{escape_html(action.label)}: {plural(count, spec.noun, spec.nouns)}</b>{why}?"


def result_html(done: pd.DataFrame) -> str:
    """What a move did, as the counts of its ``status`` column (``cancelled: 2 · removed: 1``), escaped."""
    counts = done["status"].value_counts() if "status" in done else pd.Series(dtype="int64")
    parts = " · ".join(f"{escape_html(str(status))}: <b>{count}</b>" for status, count in counts.items())
    batch = str(done.attrs.get("batch", "") or (done["batch"].iloc[0] if "batch" in done and len(done) else ""))
    return f"<p>Done: {parts or 'nothing'}" + (f" · batch <code>{escape_html(batch)}</code>" if batch else "") + "</p>"
