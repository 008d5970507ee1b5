"""What the dead-letter panel's filters keep: a kind, a text search, a time range, a group, chosen rows.

Pure functions on a ``dead_letters()`` frame, so the panel's widgets only
read their values and call these (tested without a browser). The frame is
never changed: each function returns a selection of its rows.

* The **search** is :func:`opslib.search.search_mask`'s: a case-insensitive
  literal substring looked for in the id, error, traceback, ids and payload.
* The **time range** is two texts, as people type them in the panel: a
  duration back from now (``2h``, ``30min``, ``3d``) or a time; a time
  without an offset is read in the display time zone (what the panel shows),
  one with an offset as written. Both become UTC; an empty text is open.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from opslib.checks import parse_since
from opslib.display import cut, local_time, plural
from opslib.errors import OpslibError
from opslib.frames import select_dead
from opslib.search import search_mask
from worker.printable import printable

ALL_KINDS = ""
"""The kind selector's value for every kind."""
ENTRY_LABEL_CHARS = 100


@dataclass(frozen=True)
class Filters:
    """The panel's filters as values: ``since`` / ``until`` already in UTC (None: open)."""

    kind: str = ALL_KINDS
    search: str = ""
    since: pd.Timestamp | None = None
    until: pd.Timestamp | None = None


def panel_time(value: str, name: str) -> pd.Timestamp | None:
    """A time typed in the panel as UTC: empty, a duration back from now, or a time (read as
    :func:`opslib.checks.parse_since` reads it: without a zone, in the display zone)."""
    typed = value.strip()
    if not typed:
        return None
    return parse_since(typed, name)


def read_filters(kind: str, search: str, since: str, until: str) -> Filters:
    """The filters from the widgets' values; an :class:`OpslibError` when the range is not one."""
    start, end = panel_time(since, "From"), panel_time(until, "To")
    if start is not None and end is not None and end <= start:
        raise OpslibError(f"To ({local_time(end)}) must be after From ({local_time(start)})")
    return Filters(kind=kind, search=search.strip(), since=start, until=end)


def filter_dead(dead: pd.DataFrame, filters: Filters) -> pd.DataFrame:
    """The rows the filters keep (kind, search, time range), payload columns left empty dropped."""
    if dead.empty:
        return dead
    mask = search_mask(dead, filters.search)
    if filters.kind != ALL_KINDS:
        mask &= dead["kind"] == filters.kind
    if filters.since is not None:
        mask &= dead["dead_at"] >= filters.since
    if filters.until is not None:
        mask &= dead["dead_at"] < filters.until
    return select_dead(dead, mask)


def in_group(shown: pd.DataFrame, signature: str | None) -> pd.DataFrame:
    """The rows of one failure group (none when no group is chosen)."""
    if shown.empty or signature is None:
        return shown.iloc[0:0]
    return select_dead(shown, shown["signature"] == signature)


def newest_first(dead: pd.DataFrame) -> pd.DataFrame:
    """``dead``'s rows newest first: the one order of the entry list, the preview and the CSV."""
    if dead.empty:
        return dead
    return dead.iloc[::-1].sort_values("dead_at", ascending=False, kind="stable")


def chosen_rows(group: pd.DataFrame, selected: Sequence[str]) -> pd.DataFrame:
    """The rows an action takes: the selected entries of the group, or the whole group when none is."""
    if not selected:
        return group
    return select_dead(group, group.index.isin(list(selected)))


def entry_label(dead_id: str, row: pd.Series) -> str:
    """One entry as a line of the entry list (plain text: a select's options are not HTML), escaped."""
    job = row.get("job_id") or row.get("outbox_id") or "no job id"
    error = cut(str(row["error"]), ENTRY_LABEL_CHARS)
    badge = replay_badge(row)
    again = f" · {badge}" if badge else ""
    line = f"{dead_id}{again} · {local_time(row['dead_at'])} · {row['kind'] or '(none)'} · {job} · {error}"
    return printable(line)  # a select shows controls and bidi characters raw


def failed_again(row: pd.Series) -> bool:
    """True for a dead letter that came back from a replay and died again."""
    replays = row.get("replays", 0)
    return bool(pd.notna(replays) and int(replays) > 0) or bool(row.get("replay_of"))


def replay_badge(row: pd.Series) -> str:
    """``↻ 2 replays``: how many times the entry's job was replayed before it died this time ("" for none).

    Shown right after the dead id in the entry list and on the selected
    entry, so that a job failing again after a fix stands out from the rest.
    """
    if not failed_again(row):
        return ""
    replays = row.get("replays", 0)
    count = int(replays) if pd.notna(replays) and int(replays) > 0 else 1  # replay_of alone: replayed once
    return f"↻ {plural(count, 'replay')}"
