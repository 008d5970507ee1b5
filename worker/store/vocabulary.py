"""The words the queue writes about its jobs: outcomes, dead-letter reasons, replay statuses.

Each word is written by one place and read by others (logs, metrics, opslib's
DataFrames, people at redis-cli), so each is a constant here and nowhere
else a bare string.

| word | where it appears | written by | read by |
| --- | --- | --- | --- |
| ``OUTCOME_*`` | ``Observer.job_finished``, log field ``outcome`` | the worker | metrics, the summary line |
| ``REASON_*`` | a dead entry's ``reason`` field | the bury script's callers | opslib, metrics' ``reason`` label |
| ``RECORDED_*`` | ``status`` of a ``replay:<batch>`` value | replay script, the worker | ``opslib.replay_status`` |
| ``REPLAY_*`` | ``status`` column of ``opslib.replay()`` | opslib | analysts |
| ``DISCARD_*`` | ``status`` column of ``opslib.discard()`` (with ``REPLAY_MISSING``) | opslib | analysts |
| ``STATUS_*`` | ``status`` column of ``opslib.replay_status()`` | opslib | analysts |
| ``WHERE_*`` | ``where`` column of ``opslib.replay_status()`` | opslib | analysts |
| ``ARCHIVED_*`` | ``status`` of a row of the archive (table ``dead_letters``) | its writers | opslib |
"""

from __future__ import annotations

# What became of one attempt (the loop's report to its observers).
OUTCOME_SUCCEEDED = "succeeded"
OUTCOME_RETRIED = "retried"
OUTCOME_DEAD = "dead"
OUTCOMES = (OUTCOME_SUCCEEDED, OUTCOME_RETRIED, OUTCOME_DEAD)

# Why an entry is in jobs:dead.
REASON_EXHAUSTED = "exhausted"
"""The handler failed on its last attempt: the kind's retries are used up."""
REASON_PERMANENT = "permanent"
"""The handler raised an error its kind's policy lists in ``give_up_on``: no retry would help."""
REASON_POISON = "poison"
"""Delivered ``MAX_DELIVERIES`` times without an outcome (it killed its worker); not run again."""
REASON_MALFORMED = "malformed"
"""The entry is not a job (no kind, bad attempts, not UTF-8, a field too big); never run."""
REASON_UNKNOWN_KIND = "unknown_kind"
"""The entry names a kind this worker does not know; never run."""
REASON_OVERSIZED = "oversized"
"""The entry is over ``MAX_JOB_BYTES``; never run, and its dead entry keeps only each field's first KiB."""
REASON_CANCELLED = "cancelled"
"""Only in the archive: a delayed job cancelled before it ran (``opslib.cancel_delayed``); never in jobs:dead."""
REASONS = (
    REASON_EXHAUSTED,
    REASON_PERMANENT,
    REASON_POISON,
    REASON_MALFORMED,
    REASON_UNKNOWN_KIND,
    REASON_OVERSIZED,
)
REASONS_AFTER_A_RUN = (REASON_EXHAUSTED, REASON_PERMANENT)
"""Reasons of entries whose handler ran (their duration is measured); the others never ran."""

# What the replay script and then the worker record for each replayed job (``replay:<batch>``).
RECORDED_QUEUED = "queued"
RECORDED_SUCCEEDED = "succeeded"
RECORDED_RETRYING = "retrying"
RECORDED_FAILED = "failed"

# opslib.replay(): what happened to each dead id asked for.
REPLAY_REPLAYED = "replayed"
REPLAY_MISSING = "missing"
REPLAY_WOULD_REPLAY = "would replay"

# opslib.discard(): what happened to each dead id asked for (or REPLAY_MISSING).
DISCARD_DISCARDED = "discarded"
DISCARD_WOULD_DISCARD = "would discard"

# opslib.replay_status(): what became of each replayed job, and where it is now.
STATUS_SUCCEEDED = "succeeded"
STATUS_FAILED_AGAIN = "failed again"
STATUS_RETRYING = "retrying"
STATUS_STILL_QUEUED = "still queued"
FINAL_STATUSES = (STATUS_SUCCEEDED, STATUS_FAILED_AGAIN)
WHERE_DEAD = "jobs:dead"
WHERE_DELAYED = "delayed"
WHERE_JOBS = "jobs"
WHERE_RUNNING = "running"

# What became of a dead entry, in the archive (table dead_letters, column status); a replayed
# entry's replay_outcome there is STATUS_SUCCEEDED or STATUS_FAILED_AGAIN.
ARCHIVED_DEAD = "dead"
ARCHIVED_REPLAYED = "replayed"
ARCHIVED_DISCARDED = "discarded"
