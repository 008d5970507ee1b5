"""A job's failed attempts, carried on the wire: the ``attempt_log`` field.

A dead letter's ``error`` is its last attempt's; the ones before would be
lost when the job is retried. So each retry writes, in the delayed member,
``attempt_log``: a compact JSON list of ``{"at", "duration_s", "worker",
"error"}`` (oldest first), the attempt that just failed appended; the bury
move copies it into the dead entry with the final attempt appended. It keeps
the last :data:`KEPT_ATTEMPTS`, each error cut to :data:`ERROR_CHARS`, so the
field stays a few KiB (far under ``MAX_FIELD_BYTES``) however often a job
retries.

A replay drops the field (``worker.store.wire.DEAD_FIELDS``): the replayed
job's first attempt starts a fresh log, and the attempts before the replay
are found through ``replay_of`` (``opslib.show`` follows that chain).
Handlers see the field in ``Job.fields`` like any other and ignore it.
"""

from __future__ import annotations

import json
from typing import Any

FIELD = "attempt_log"
KEPT_ATTEMPTS = 10
"""The log keeps this many attempts, the latest."""
ERROR_CHARS = 500
"""Each attempt's error is cut to this many characters (the dead entry's ``error`` keeps the last one whole)."""
WORKER_CHARS = 200
"""Each attempt's worker name is cut to this many characters."""
MAX_BYTES = 8192
"""The field's most UTF-8 bytes: the oldest attempts go first to stay under it. The latest always fits (its
error and worker cut as above, every character escaped at worst: about 4.3 KB)."""
ROOM = MAX_BYTES + len(FIELD) + 9
"""What a retry may add to a job: this field and the digits of ``attempts``. The worker reads an entry as
oversized only beyond ``MAX_JOB_BYTES`` plus this, so a job enqueued just under the limit can still retry."""
KEYS = ("at", "duration_s", "worker", "error")


def parse(value: str | None) -> list[dict[str, Any]]:
    """The attempts of an ``attempt_log`` field, oldest first; ``[]`` when absent or not such a list
    (a field written by hand is shown, never trusted to be well formed)."""
    if not value:
        return []
    try:
        loaded = json.loads(value)
    except ValueError:
        return []
    if not isinstance(loaded, list):
        return []
    return [{key: item.get(key, "") for key in KEYS} for item in loaded if isinstance(item, dict)]


def appended(previous: str | None, *, at: str, duration_s: float, worker: str, error: str) -> str:
    """``previous`` (an ``attempt_log`` field, or None) with one more attempt, as the field's compact JSON."""
    attempt = {"at": at, "duration_s": round(duration_s, 6), "worker": _cut(worker, WORKER_CHARS)}
    attempt["error"] = _cut(error, ERROR_CHARS)
    attempts = [*parse(previous), attempt][-KEPT_ATTEMPTS:]
    while True:
        field = json.dumps(attempts, separators=(",", ":"), ensure_ascii=False)
        if len(attempts) == 1 or len(field.encode()) <= MAX_BYTES:
            return field
        attempts = attempts[1:]


def _cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"
