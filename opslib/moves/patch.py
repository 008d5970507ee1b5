"""Edit and replay: the fields a replay sets on each job (``patch=``), checked, and each entry's diff.

A dead letter's payload is sometimes what failed (a bad address, a shape no
worker reads any more): ``replay(ids, patch={"to": "ada@example.org"})`` puts
the jobs back with those fields set, in the replay's own atomic move (the
fields ride with the replay's trace context into ``replay.lua``, each
replacing the entry's own). A patch may set ``v``: a payload re-run through
today's upcasters. It may not set the queue's own fields (the ids, attempts,
the replay's marks, the error fields). A dry run shows what each entry would
become (the column ``changes``: ``field: 'old' -> 'new'``, ``(none)`` for a
field the entry lacks); the action's record keeps the patch (``detail``).
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from opslib.columns import TEXT
from opslib.errors import OpslibError
from opslib.session import Servers
from worker.store.wire import DEAD_FIELDS, text

#: Fields a patch may not set: the job's identity, its attempts and the replay's own marks, the error fields.
RESERVED = frozenset({"kind", "job_id", "outbox_id", "attempts", "replay_of", "replay_batch", "replays", *DEAD_FIELDS})


def checked_patch(patch: Mapping[str, object] | None) -> dict[str, str]:
    """``patch`` as the fields to set (strings), or one line saying what is wrong with it."""
    out: dict[str, str] = {}
    for name, value in (patch or {}).items():
        if not isinstance(name, str) or not name or name in RESERVED:
            raise OpslibError(
                f"patch cannot set {name!r}: give payload fields (or 'v'), not one of {', '.join(sorted(RESERVED))}"
            )
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise OpslibError(f"patch field {name!r} must be a string or a number, got {type(value).__name__}")
        out[name] = str(value)
    return out


def assignment_of(text: str) -> tuple[str, str]:
    """``FIELD=VALUE`` as (field, value), or one line saying what is wrong."""
    name, equals, value = text.strip().partition("=")
    if not equals or not name.strip():
        raise OpslibError(f"a patch is FIELD=VALUE (e.g. to=ada@example.org), got {text.strip()!r}")
    return name.strip(), value


def parsed_patch(text: str) -> dict[str, str]:
    """The panel's patch box, ``FIELD=VALUE; FIELD=VALUE`` (empty: no patch), as the fields to set."""
    return checked_patch(dict(assignment_of(part) for part in text.split(";") if part.strip()))


def changes(fields: Mapping[str, str], patch: Mapping[str, str]) -> str:
    """What ``patch`` changes in an entry's ``fields``: ``name: 'old' -> 'new'``, joined by ``; ``."""
    said = [
        f"{name}: {repr(fields[name]) if name in fields else '(none)'} -> {value!r}"
        for name, value in sorted(patch.items())
        if fields.get(name) != value
    ]
    return "; ".join(said) or "(no change)"


def with_changes(frame: pd.DataFrame, patch: Mapping[str, str], servers: Servers) -> pd.DataFrame:
    """``frame`` (a replay's, with ``dead_id`` and ``partition``) with the column ``changes`` for each
    entry still in ``jobs:dead`` (``""`` for one only the archive holds, or none)."""
    column = []
    with servers.session("look up dead letters") as session:
        for dead_id, part in zip(frame["dead_id"], frame["partition"], strict=True):
            found = session.client.xrange(session.parts[part].dead, dead_id, dead_id) if part >= 0 else []
            fields = {text(name): text(value) for name, value in found[0][1].items()} if found else None
            column.append("" if fields is None else changes(fields, patch))
    out = frame.copy()
    out["changes"] = pd.Series(column, index=frame.index, dtype=object).astype(TEXT)
    out.attrs.update(frame.attrs)
    return out
