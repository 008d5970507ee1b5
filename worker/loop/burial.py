"""What a dead letter holds and what its log line says: the fields the bury move adds to an entry.

:class:`worker.loop.outcomes.Outcomes` decides an entry's outcome (succeed,
retry, dead-letter) and makes the moves; this module builds what they carry:
a dead entry's fields (:func:`dead_fields`, the failed job's ``attempt_log``
with the final attempt appended, see :mod:`worker.store.attempt_log`), a
retry's delayed member (:func:`retry_member`, encoded by the caller), and a job's facts for a log
record (:func:`log_fields`, :func:`dead_log_line`), all before the move is made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from worker.kinds import Job
from worker.redact import capture
from worker.store import attempt_log
from worker.store.failures import ERROR_BYTES
from worker.store.versions import WAITING_SINCE_FIELD
from worker.store.vocabulary import OUTCOME_DEAD
from worker.store.wire import job_id_of


@dataclass(frozen=True)
class Burial:
    """An entry on its way to ``jobs:dead``: what its dead entry adds, and what the log line says.

    ``job`` is the parsed job, when there is one. Without it, ``kind`` is
    None when only the dead entry knows it (poison: never parsed here), or
    what the malformed entry named ("" for nothing). ``happened`` completes
    the log line's "Job <kind> <id> ...", e.g. "failed on attempt 2 of 2
    after 3.1 ms".
    """

    entry_id: str
    reason: str
    attempts: int
    error: str
    happened: str
    traceback: str = ""
    job: Job | None = None
    kind: str | None = ""
    duration_s: float = 0.0
    min_idle_ms: int = 0
    kept: dict[str, str] | None = None
    """Fields the dead entry holds instead of the entry's own (an oversized entry, cut down)."""
    lock: str | None = None
    """The unique lock the job holds, released by the burial (:mod:`worker.store.unique`); None: none."""


def log_fields(job: Job, outcome: str, duration_s: float, reason: str | None = None) -> dict[str, Any]:
    """The job's facts for a log record's ``extra`` (JSON logs carry them as fields)."""
    return {
        "kind": job.kind,
        "job_id": job.job_id,
        "attempt": job.attempts + 1,
        "outcome": outcome,
        "duration_ms": round(duration_s * 1000, 3),
        "reason": reason,
        "request_id": job.fields.get("request_id"),
        "trace": job.fields.get("trace"),
    }


def retry_member(job: Job, attempts: int, *, error: str, duration_s: float, worker: str, at: str) -> dict[str, str]:
    """The fields of a job's next attempt (the delayed member, once encoded): its own, ``attempts`` and the
    attempt log brought up to date. A job handed back to wait has run now: its retry waits for its time, not
    for a worker, so it leaves ``waiting_since`` behind (else it would count as awaiting a worker)."""
    log = attempt_log.appended(
        job.fields.get(attempt_log.FIELD), at=at, duration_s=duration_s, worker=worker, error=error
    )
    kept = {name: value for name, value in job.fields.items() if name != WAITING_SINCE_FIELD}
    return {**kept, "attempts": str(attempts), attempt_log.FIELD: log}


def dead_fields(burial: Burial, *, worker: str, at: str) -> dict[str, str]:
    """The fields the bury move writes over (or, for a cut-down entry, instead of) the entry's own.

    A job that ran (``burial.job``) gets its ``attempt_log`` with this last
    attempt appended; an entry never run here (poison, malformed) keeps
    whatever log it carries.
    """
    fields = {
        **(burial.kept or {}),
        "attempts": str(burial.attempts),
        "error": capture(burial.error, ERROR_BYTES),  # a malformed entry's error quotes its fields
        "traceback": burial.traceback,
        "reason": burial.reason,
        "failed_at": at,
        "worker": worker,
    }
    if burial.job is not None:
        fields[attempt_log.FIELD] = attempt_log.appended(
            burial.job.fields.get(attempt_log.FIELD),
            at=at,
            duration_s=burial.duration_s,
            worker=worker,
            error=burial.error,
        )
    return fields


def dead_log_line(burial: Burial) -> tuple[str, dict[str, Any]] | None:
    """The subject of a dead letter's log line ("Job <kind> <id>", "Entry <id>") and its fields; None for
    an entry never parsed here (poison), which only its dead entry describes (:func:`poison_log_line`)."""
    job = burial.job
    if job is not None:
        return f"Job {job.kind} {job.job_id}", log_fields(job, OUTCOME_DEAD, burial.duration_s, burial.reason)
    if burial.kind is None:
        return None
    return f"Entry {burial.entry_id}", {"kind": burial.kind or None, "outcome": OUTCOME_DEAD, "reason": burial.reason}


def poison_log_line(dead: dict[str, str], burial: Burial) -> tuple[str, dict[str, Any]]:
    """:func:`dead_log_line` of an entry never parsed here, from its dead entry's fields ``dead`` (read back)."""
    extra = {
        "kind": dead.get("kind", "?"),
        "job_id": job_id_of(dead, "?"),
        "attempt": burial.attempts,
        "outcome": OUTCOME_DEAD,
        "reason": burial.reason,
    }
    return f"Job {extra['kind']} {extra['job_id']} (entry {burial.entry_id})", extra
