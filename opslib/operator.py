"""Who acts and why: the one record every operator's move carries, checked once when it is made.

Every move through opslib (replay, discard, run_now, cancel_delayed, pause,
resume, throttle) names who makes it (``by``, the operating-system user
unless given) and, where the move must say why, a reason. Both are checked
here, before anything is read or written, with one message per action
saying what a right value looks like; the move then writes the same record
into the operators' actions (:mod:`opslib.actions`) and, for a discard or a
cancel, into the archive.
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass

from opslib.errors import OpslibError

MAX_REASON_CHARS = 2000

#: What each action's missing reason asks for.
WHY = {
    "discard": "say why these jobs must never run, e.g. reason='orders refunded, INC-2211' "
    "(it is kept in the archive with who discarded them)",
    "pause": "say why the kind must wait, e.g. reason='seat map fix, INC-2214' (it is shown with the pause)",
    "resume": "say why, or leave reason out",
    "throttle": "say why, e.g. reason='provider asks for 10/s, INC-2215' (it is shown with the throttle)",
    "replay": "say why, or leave reason out",
    "sql": "say what the data fix is for, e.g. reason='seat map 14-C -> 14C, INC-2214', or leave reason out",
    "cancel": "say why these jobs must stop, e.g. reason='wrong template sent, INC-2217' "
    "(it is kept with who cancelled them, and opslib.find shows it)",
    "cancel_delayed": "the reason must say why these jobs must not run, e.g. reason='order 4471 was refunded' "
    "(it is kept in the archive with who cancelled them)",
}


def check_reason(reason: object, action: str = "discard") -> str:
    """``reason`` when it says why (non-empty text of at most :data:`MAX_REASON_CHARS` characters)."""
    if not isinstance(reason, str) or not reason.strip():
        raise OpslibError(f"{action} needs a reason, got {reason!r}: {WHY[action]}; nothing changed")
    if len(reason) > MAX_REASON_CHARS:
        raise OpslibError(f"reason is {len(reason)} characters; keep it under {MAX_REASON_CHARS}")
    return reason.strip()


def who(by: object) -> str:
    """``by``, or the operating-system user running this."""
    if by is not None:
        if not isinstance(by, str) or not by.strip():
            raise OpslibError(f"by must be a non-empty string (who acts), got {by!r}")
        return by.strip()
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"


@dataclass(frozen=True)
class Operator:
    """Who makes a move (``by``) and why (``reason``; None where the action leaves it optional and none
    was given). Made by :meth:`acting`, so a record that exists has been checked."""

    by: str
    reason: str | None

    @classmethod
    def acting(cls, action: str, *, by: object, reason: object, required: bool = True) -> Operator:
        """The checked record of ``action``: ``reason`` is required, or (``required=False``) checked
        only when given."""
        why = check_reason(reason, action) if required or reason is not None else None
        return cls(who(by), why)
