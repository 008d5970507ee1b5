"""Checks of the arguments people type: kinds, entry ids, times, limits.

Each raises :class:`~opslib.errors.OpslibError` with what was wrong and what
would be right, before anything is read or written.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from opslib.bounded import Scan, stream_entries, zset_members
from opslib.display import check_tz, display_tz, local_time
from opslib.errors import OpslibError, UnknownKind
from worker.store.keys import Keys
from worker.store.wire import text

ENTRY_ID = re.compile(r"^\d{1,20}-\d{1,20}$")
BATCH_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")
#: A duration back from now as people type it: ``2h``, ``30min``, ``3d``, ``90s``, ``1.5h``.
DURATION = re.compile(r"^\d+(\.\d+)?\s*(d|days?|h|hours?|min|minutes?|m|s|seconds?)$")
#: A time of day alone (today's, in the zone it is read in): ``15:46``, ``15:46:30``.
TIME_OF_DAY = re.compile(r"^\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?$")


def queue_kinds(client: Any, parts: Iterable[Keys]) -> set[str]:
    """The kinds the queue holds now: in ``jobs``, ``delayed`` and ``jobs:dead`` of every partition.

    opslib never imports an application's kind modules (a notebook kernel
    would import its handlers and their clients to check a string), so a kind
    name is checked against the queue itself. Read only when a name is not
    among the rows already at hand: an error path, which reads the first
    :data:`opslib.bounded.CAP` entries of each structure in pages, never a whole
    backlog in one command.
    """
    found: set[str] = set()
    for keys in parts:
        for stream in (keys.jobs, keys.dead):
            for _entry_id, fields in stream_entries(client, stream, Scan(stream)):
                found.add(text(fields.get(b"kind", b"")))
        for member in zset_members(client, keys.delayed, Scan(keys.delayed)):
            try:
                found.add(str(json.loads(member).get("kind", "")))
            except (ValueError, AttributeError):
                continue
    return found - {""}


def check_kind(
    kind: object,
    seen: Iterable[str],
    held: Callable[[], Iterable[str]] = set,
    registry: Iterable[str] = (),
    holder: str = "the queue holds now",
) -> str:
    """``kind`` when it is among ``seen`` (the rows at hand), what the queue holds (``held()``,
    read only when needed) or a ``registry`` the caller passes; an :class:`OpslibError` otherwise.

    ``holder`` says where ``held()`` looked, for the message ("the archive holds").
    """
    if not isinstance(kind, str) or not kind:
        raise OpslibError(f"kind must be a non-empty string such as 'render_tickets', got {kind!r}")
    known = {k for k in seen if k} | set(registry)
    if kind in known:
        return kind
    known |= set(held())
    if kind in known:
        return kind
    close = difflib.get_close_matches(kind, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    listed = ", ".join(sorted(known)) or "none"
    raise UnknownKind(f"unknown kind {kind!r}{hint} Kinds {holder}: {listed}")


def check_entry_id(value: object) -> str:
    """``value`` when it is a stream entry id (``<milliseconds>-<sequence>``)."""
    entry_id = text(value) if isinstance(value, bytes | str) else value
    if not isinstance(entry_id, str) or not ENTRY_ID.match(entry_id):
        raise OpslibError(
            f"{value!r} is not a stream entry id; ids look like 1758203641877-0 "
            "(the index of dead_letters(), or the dead_id column of a replay)"
        )
    return entry_id


def check_batch(value: object) -> str:
    """``value`` when it can be a replay batch id (the ``batch`` column of a replay)."""
    if not isinstance(value, str) or not BATCH_ID.match(value):
        raise OpslibError(
            f"{value!r} is not a replay batch id; use the batch column of replay() or replay_kind(), "
            "e.g. 20261130T211400Z-3f9a1c2e"
        )
    return value


def check_limit(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise OpslibError(f"limit must be a whole number >= 1 or None, got {value!r}")
    return int(value)


def parse_since(since: object, name: str = "since") -> pd.Timestamp | None:
    """A UTC timestamp from a time, an ISO string, or a duration back from now (a timedelta, or a string
    such as ``"2h"``, ``"30min"``, ``"3d"``).

    A time that names no zone (``"2026-12-01 15:46"``, ``"15:46"`` for today, a
    naive datetime) is read in the display zone (``OPSLIB_TZ`` /
    :func:`opslib.set_display_tz`); one with an offset (``+01:00``, ``Z``) or a
    zone name after it (``"2026-12-01 15:46 Europe/Prague"``, ``"... UTC"``) in
    that zone. ``name`` is the argument's name in the message (``until`` takes
    the same forms).
    """
    if since is None:
        return None
    if isinstance(since, timedelta | pd.Timedelta | np.timedelta64):
        return pd.Timestamp.now(tz="UTC") - pd.Timedelta(since)
    if isinstance(since, str) and DURATION.match(since.strip()):
        return pd.Timestamp.now(tz="UTC") - pd.Timedelta(since.strip())
    if isinstance(since, str | datetime | pd.Timestamp | np.datetime64):
        zone, when = typed_time(since)
        if when is not pd.NaT:
            return in_zone(when, zone, since, name) if when.tzinfo is None else when.tz_convert("UTC")
    raise OpslibError(
        f"{name}={since!r} is not a time; give a time such as '2026-11-30 21:00' or '21:00' (today), read in "
        f"{display_tz()} unless it has an offset or a zone ('2026-11-30 21:00 UTC'), a datetime, or a duration "
        "back from now such as '2h', '30min', '3d' or pd.Timedelta('2h')"
    )


def check_window(since: object, until: object) -> tuple[pd.Timestamp | None, pd.Timestamp | None]:
    """``since`` and ``until`` as UTC times (the forms of :func:`parse_since`), in order."""
    start, end = parse_since(since), parse_since(until, "until")
    if start is not None and end is not None and end <= start:
        raise OpslibError(f"until ({local_time(end)}) must be after since ({local_time(start)})")
    return start, end


def typed_time(value: str | datetime | pd.Timestamp | np.datetime64) -> tuple[str, pd.Timestamp]:
    """The zone a typed time is read in (its own zone name, else the display zone) and the time as parsed."""
    zone = display_tz()
    if isinstance(value, str):
        text_value = value.strip()
        head, _, tail = text_value.rpartition(" ")
        if head and ("/" in tail or tail in ("UTC", "GMT")):
            zone, text_value = check_tz(tail), head
        if TIME_OF_DAY.match(text_value):
            today = pd.Timestamp.now(tz=zone).strftime("%Y-%m-%d")
            text_value = f"{today} {text_value}"
        value = text_value
    try:
        return zone, pd.Timestamp(value)
    except ValueError:
        return zone, pd.NaT


def in_zone(when: pd.Timestamp, zone: str, typed: object, name: str) -> pd.Timestamp:
    """``when`` (a wall-clock time) read in ``zone``, in UTC; a time the clocks skip or pass twice is refused."""
    try:
        return when.tz_localize(zone).tz_convert("UTC")
    except ValueError:  # pandas' AmbiguousTimeError and NonExistentTimeError
        raise OpslibError(
            f"{name}={typed!r} is not one instant in {zone} (the clocks change then); add an offset, "
            "e.g. '2026-10-25 02:30+01:00'"
        ) from None
