"""Error signatures checked and grouped: :func:`check_signature` and :func:`failure_groups_to_frame`.

:func:`signature` and :func:`error_type` live in :mod:`worker.store.signatures`
(the archiver fills the archive's columns with them) and are re-exported
here. A signature is a fixed point (``signature(s) == s``), which is how
:func:`check_signature` tells a signature from a raw error message pasted by
mistake.

:func:`failure_groups_to_frame` is the pure grouping behind
``opslib.failure_groups``; it takes the frame of ``dead_letters`` and needs no
Redis.
"""

from __future__ import annotations

import pandas as pd

from opslib.errors import OpslibError
from opslib.frames import TEXT, TIME, typed_frame
from worker.store.signatures import error_type, signature

__all__ = ["check_signature", "error_type", "failure_groups_to_frame", "signature"]


def check_signature(value: object) -> str:
    """``value`` when it is a signature as :func:`signature` writes it; an :class:`OpslibError` otherwise."""
    if not isinstance(value, str) or not value.strip():
        raise OpslibError(
            f"signature must be a non-empty string, got {value!r}; copy one from failure_groups().signature"
        )
    normal = signature(value)
    if normal != value:
        raise OpslibError(
            f"{value[:120]!r} is not a signature (an error message, or a signature that was edited); "
            f"its signature is {normal[:120]!r}. Copy one from failure_groups().signature"
        )
    return value


GROUP_COLUMNS = {
    "signature": TEXT,
    "error_type": TEXT,
    "kinds": TEXT,
    "count": "int64",
    "first_seen": TIME,
    "last_seen": TIME,
    "example_id": TEXT,
    "example_error": TEXT,
}


def failure_groups_to_frame(dead: pd.DataFrame) -> pd.DataFrame:
    """One row per error signature of ``dead`` (a ``dead_letters()`` frame), the largest group first.

    Columns: signature (str), error_type (str), kinds (str: the kinds in the
    group, sorted, comma-separated), count (int64), first_seen and last_seen
    (datetime64[ns, UTC]: the oldest and newest ``dead_at``), example_id (str:
    the newest entry's id), example_error (str: its error). Ties in count go
    to the group seen first. Index: 0..n-1.
    """
    if dead.empty:
        return typed_frame({name: [] for name in GROUP_COLUMNS}, GROUP_COLUMNS)
    dead = dead.sort_values("dead_at", kind="stable")
    grouped = dead.groupby("signature", sort=False, observed=True)
    newest = dead.index.to_series().groupby(dead["signature"].to_numpy(), sort=False).last()
    columns = {
        "signature": list(newest.index),
        "error_type": list(dead.loc[newest.values, "error_type"]),
        "kinds": [", ".join(sorted(set(kinds))) for kinds in grouped["kind"].agg(list)],
        "count": list(grouped.size()),
        "first_seen": list(grouped["dead_at"].min()),
        "last_seen": list(grouped["dead_at"].max()),
        "example_id": list(newest.values),
        "example_error": list(dead.loc[newest.values, "error"]),
    }
    frame = typed_frame(columns, GROUP_COLUMNS)
    return frame.sort_values(["count", "first_seen"], ascending=[False, True], kind="stable", ignore_index=True)
