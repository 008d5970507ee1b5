"""The records of ``jobs:dead:log``: what happened to dead entries, waiting to reach the archive.

A move out of ``jobs:dead`` (a replay, a discard) is one Lua script that
deletes the entry and adds a record here in the same step; the worker adds a
record when a replayed job reaches its final outcome. The archiver applies
the records to PostgreSQL in order and then trims them, so PostgreSQL being
away never blocks a worker, a replay or a discard: the records wait.

A record is a stream entry with these fields (text unless said otherwise):

==================  ==========================================================
``event``           ``replayed`` | ``discarded`` | ``outcome``
``dead_id``         the dead entry it is about
``at``              when, ISO-8601 UTC
``batch``           the replay or discard batch
``new_id``          replayed: the job's new entry on ``jobs``
``by``, ``reason``  discarded: who and why; replayed: who (``by``)
``outcome``         outcome: ``succeeded`` | ``failed again``
``replay_dead_id``  outcome, failed again: the new dead entry
``f.<name>``        replayed and discarded by a script: the dead entry's own
                    fields, byte for byte, so the archive gets the row even
                    when the archiver never saw the entry
==================  ==========================================================

A delayed job cancelled before it ran (``opslib.cancel_delayed``, the
``cancel_delayed`` script) gets a ``discarded`` record too, so the archive
holds it as ``discarded`` with the reason: it carries the job's fields with
``f.reason`` = ``cancelled``, and a dead id of the form
``<ms>-<seq>-cancelled`` (:data:`CANCELLED_SUFFIX`), where ``<ms>-<seq>`` is
the record's own id in this log. A ``jobs:dead`` entry id is digits only, so
the two never collide; the milliseconds still say when (``dead_at``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from worker.archive.table import OUTCOME_FAILED_AGAIN, OUTCOME_SUCCEEDED

EVENT_REPLAYED = "replayed"
EVENT_DISCARDED = "discarded"
EVENT_OUTCOME = "outcome"
CANCELLED_SUFFIX = "-cancelled"
"""Ends the dead id of a cancelled delayed job's record (the ``cancel_delayed`` script writes it)."""
ENTRY_FIELD = b"f."
"""Prefix of the fields that carry the dead entry's own fields (the Lua scripts write ``'f.' .. name``)."""


@dataclass(frozen=True)
class Record:
    """One record of the log, parsed."""

    record_id: str
    event: str
    dead_id: str
    meta: dict[str, str]
    entry: list[tuple[bytes, bytes]] | None
    """The dead entry's fields in their order, when the record carries them."""


def parse_record(record_id: bytes | str, fields: Mapping[bytes, bytes]) -> Record:
    """A log entry as redis-py returns it (bytes, not decoded) as a :class:`Record`."""
    meta: dict[str, str] = {}
    entry: list[tuple[bytes, bytes]] = []
    for name, value in fields.items():
        if name.startswith(ENTRY_FIELD):
            entry.append((name[len(ENTRY_FIELD) :], value))
        else:
            meta[name.decode("utf-8", "backslashreplace")] = value.decode("utf-8", "backslashreplace")
    return Record(
        record_id=record_id.decode() if isinstance(record_id, bytes) else record_id,
        event=meta.pop("event", ""),
        dead_id=meta.pop("dead_id", ""),
        meta=meta,
        entry=entry or None,
    )


def outcome_record(dead_id: str, batch: str, *, dead_again: str | None, at: str) -> dict[Any, Any]:
    """The record of a replayed job's final outcome: succeeded, or failed again as ``dead_again``
    (field -> value, typed as redis-py's ``xadd`` takes it)."""
    record: dict[Any, Any] = {"event": EVENT_OUTCOME, "dead_id": dead_id, "batch": batch, "at": at}
    if dead_again is None:
        record["outcome"] = OUTCOME_SUCCEEDED
    else:
        record["outcome"] = OUTCOME_FAILED_AGAIN
        record["replay_dead_id"] = dead_again
    return record


def next_id(entry_id: str) -> str:
    """The smallest stream id above ``entry_id`` (for ``XTRIM MINID``)."""
    millis, _, seq = entry_id.partition("-")
    return f"{millis}-{int(seq or 0) + 1}"
