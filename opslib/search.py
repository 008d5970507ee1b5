"""Text search in dead letters: a case-insensitive literal substring (no regex to escape) looked for in the
entry id, the error, the traceback, the job's ids (with its ``trace`` and trace id) and every payload field.

One rule for ``dead_letters(search=...)``, the panel's search box and
``python -m opslib dead --search``; ``archive(search=...)`` asks PostgreSQL
the same question (:data:`ARCHIVE_SEARCH`).
"""

from __future__ import annotations

import pandas as pd

from opslib.errors import OpslibError
from opslib.frames import DEAD_COLUMNS

SEARCHED_COLUMNS = ("error", "traceback", "job_id", "outbox_id", "request_id", "trace", "trace_id")
"""Searched besides the entry id and the payload's own fields."""

#: The archive's condition for the same search: the id, error, traceback and every wire field (ids and payload).
ARCHIVE_SEARCH = (
    "position(lower(%(search)s) in "
    "lower(concat_ws(' ', dead_id, error, traceback, request_id, trace, fields::text))) > 0"
)


def payload_columns(dead: pd.DataFrame) -> list[str]:
    """The columns a dead letter's payload brought (after the fixed ones)."""
    return [name for name in dead.columns if name not in DEAD_COLUMNS]


def search_mask(dead: pd.DataFrame, search: str | None) -> pd.Series:
    """Rows whose id, error, traceback, ids or payload contain ``search`` (any case); every row when empty."""
    if not search:
        return pd.Series(True, index=dead.index)
    needle = search.casefold()
    found = pd.Series(dead.index.astype(str).str.casefold().str.contains(needle, regex=False), index=dead.index)
    for name in [*SEARCHED_COLUMNS, *payload_columns(dead)]:
        if name in dead.columns:
            values = dead[name].astype("object").where(dead[name].notna(), "").astype(str)
            found |= values.str.casefold().str.contains(needle, regex=False)
    return found


def check_search(search: object) -> str | None:
    """``search`` stripped (None when empty), or an error for what is not text."""
    if search is None:
        return None
    if not isinstance(search, str):
        raise OpslibError(f"search must be text such as '4471' or 'SeatLabelInvalid', got {search!r}")
    return search.strip() or None
