"""A payload's version on the wire: the field ``v``, and the versions this process declares.

A kind's payload changes shape over deploys (``send_email`` gains ``to`` and
loses ``email``). ``@job_kind(..., version=2, upcast={1: fn})`` declares the
shape its handler reads; ``enqueue`` writes that version into the job's field
``v`` so that a worker can tell an old payload (upcast it) from one newer
than it knows (hand it back for a newer worker). A job without ``v`` is
version 1, so every job written before versions existed stays readable.

:data:`DECLARED` is the one piece of state the store holds of the kinds:
``worker.kinds`` fills it as kinds register, so ``enqueue`` in a process that
registers a kind stamps that kind's version (the store imports nothing of
``worker.kinds``; an import-linter contract keeps it so).

The fields a hand-back adds (:data:`HANDED_BACK_FIELD`, :data:`WAITING_SINCE_FIELD`)
ride on the job until it runs; the handler sees them in ``job.fields``. Its retry
drops :data:`WAITING_SINCE_FIELD` (:func:`worker.loop.burial.retry_member`): only a
job that waits for a worker carries it in ``delayed`` (:mod:`worker.store.awaiting`).
"""

from __future__ import annotations

#: The field holding a payload's version (decimal); absent means 1.
VERSION_FIELD = "v"
#: How many times workers that could not run the job handed it back (decimal).
HANDED_BACK_FIELD = "handed_back"
#: When a worker first found no live worker able to run the job (epoch seconds).
WAITING_SINCE_FIELD = "waiting_since"

DECLARED: dict[str, int] = {}
"""The version of each kind registered in this process (``worker.kinds`` writes it, ``enqueue`` reads it)."""


def version_of(raw: bytes | str | None) -> int | None:
    """The version a ``v`` value names: 1 when absent, None when it is not a positive decimal integer."""
    if raw is None:
        return 1
    value = raw.decode("ascii", "replace") if isinstance(raw, bytes) else raw
    if not (value.isascii() and value.isdigit()) or len(value) > 9 or int(value) < 1:
        return None
    return int(value)


def stamped(job: dict[str, str], version: int | None) -> dict[str, str]:
    """``job`` with its ``v``: ``version`` when given, else the version this process declares for its kind
    (none when it declares none: a job without ``v`` is version 1). A ``v`` among the fields is kept.

    A ``v`` also tells a worker lacking the kind that code declaring it wrote
    the job (a kind added before its first worker is up): it waits rather than
    being dead-lettered as a typo (:mod:`worker.loop.handback`).
    """
    if version is not None:
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise ValueError(f"version must be an integer >= 1 (e.g. 2), got {version!r}")
        job[VERSION_FIELD] = str(version)
    elif VERSION_FIELD not in job and job.get("kind", "") in DECLARED:
        job[VERSION_FIELD] = str(DECLARED[job["kind"]])
    return job
