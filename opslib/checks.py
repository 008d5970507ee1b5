"""Checks of the arguments people type: kinds, entry ids, limits (times: :mod:`opslib.times`).

Each raises :class:`~opslib.errors.OpslibError` with what was wrong and what
would be right, before anything is read or written.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from opslib.bounded import Scan, stream_entries, zset_members
from opslib.errors import OpslibError, UnknownKind
from opslib.times import check_window as check_window  # the grammar lives in opslib.times; the panel
from opslib.times import parse_since as parse_since  # and older callers import them from here
from worker.store.keys import Keys
from worker.store.wire import text

ENTRY_ID = re.compile(r"^\d{1,20}-\d{1,20}$")
BATCH_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")


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
