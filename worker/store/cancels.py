"""A cancel's durable mark and its announcement: what opslib writes and the workers read.

``cancels`` (a hash per partition, :class:`~worker.store.keys.Keys`) holds a
mark per cancelled job, by job id (the entry id for an entry without one): a
JSON object with ``by``, ``reason``, ``at``, ``batch``, ``status``
(``cancelled``: it was running; ``removed``: it had not started) and
``entry_id``. The cancel_entry script writes it in the same step as it removes
or finds the entry; the workers read it at each claim refresh and
``opslib.find`` shows it. The ``cancel`` channel carries the fast path: one
message per call, ``{"job_ids": [...], "note": "by: reason"}``.

The hash stays bounded: each cancel call trims every partition's marks older
than :data:`MARK_KEEP_S` that no worker holds (the trim_cancels script: a
``removed`` job never started; a ``cancelled`` one's entry was acknowledged),
so it holds at most about a day of cancels, plus the marks of entries still
pending to a worker (which need them until they stop). A trimmed mark's
cancel is still in ``opslib.actions()``, and a removed delayed, throttled or
parked job in the archive (``discarded``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from worker.store.keys import Keys

#: How long a mark stays once no worker holds its entry (``opslib.find`` shows it meanwhile): a day.
MARK_KEEP_S = 24 * 3600
#: One trim step scans this many marks; a trim takes at most TRIM_STEPS steps per partition.
TRIM_COUNT, TRIM_STEPS = 100, 1000


def new_mark(by: str, reason: str, at: str, batch: str) -> str:
    """The JSON mark of one cancel call (the script adds ``status`` and ``entry_id``)."""
    return json.dumps({"by": by, "reason": reason, "at": at, "batch": batch}, sort_keys=True)


def cancel_note(mark: dict[str, Any]) -> str:
    """``by: reason`` of a mark, as the worker logs it and records the attempt's error."""
    return f"{mark.get('by', '?')}: {mark.get('reason', '')}"


def announcement(job_ids: Sequence[str], note: str) -> str:
    """The message on the ``cancel`` channel."""
    return json.dumps({"job_ids": list(job_ids), "note": note})


def _marks(job_ids: Sequence[str], values: Sequence[bytes | None]) -> dict[str, dict[str, Any]]:
    return {job_id: json.loads(value) for job_id, value in zip(job_ids, values, strict=True) if value}


async def read_marks(client: Any, keys: Keys, job_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The marks of those of ``job_ids`` that were cancelled (asyncio client)."""
    return _marks(job_ids, await client.hmget(keys.cancels, list(job_ids)))


def marks_of(client: Any, keys: Keys, job_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The same, with a synchronous client (opslib)."""
    return _marks(job_ids, client.hmget(keys.cancels, list(job_ids))) if job_ids else {}


def mark_cutoff(now: datetime | None = None, keep_s: float = MARK_KEEP_S) -> str:
    """The ``at`` before which a mark no worker holds may go, written as the marks' ``at`` is (now_iso)."""
    then = (now or datetime.now(UTC)) - timedelta(seconds=keep_s)
    return then.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def trim_marks(scripts: Any, cutoff: str) -> int:
    """Trim one partition's ``cancels`` (``scripts``: its :class:`~worker.store.scripts.Scripts`) of the
    marks older than ``cutoff`` that no worker holds, in bounded steps; how many went."""
    cursor, removed = b"0", 0
    for _ in range(TRIM_STEPS):
        cursor, gone = scripts.trim_cancels(cutoff, cursor, TRIM_COUNT)
        removed += int(gone)
        if int(cursor) == 0:
            break
    return removed
