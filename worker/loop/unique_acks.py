"""The settles of jobs that hold a unique key (:mod:`worker.store.unique`): each success (or acknowledged
cancel) is acknowledged by the script that releases its key (``ack_unique``), one call per job, sent at
once rather than with the next read, so that the key is free as soon as the job is done; and the key of
an entry never parsed here (poison) is read from the entry itself for its burial."""

from __future__ import annotations

from typing import Any

from worker.kinds import Job
from worker.loop.episode import Episode, outcome_key
from worker.loop.fence import StaleSettles
from worker.store.keys import Keys
from worker.store.scripts import Scripts
from worker.store.unique import UNIQUE_KEY, lock_of
from worker.store.wire import text


class UniqueAcks:
    """Successes of jobs holding a unique key, not yet acknowledged: (entry id, lock, job id)."""

    def __init__(self, keys: Keys) -> None:
        self.keys = keys
        self.waiting: list[tuple[str, str, str]] = []

    def __bool__(self) -> bool:
        return bool(self.waiting)

    def acknowledge(self, job: Job, acks: list[str]) -> None:
        """Queue ``job``'s acknowledgement (a success, a cancel): here when it holds a unique key, else on
        ``acks`` (sent with the next read)."""
        lock = lock_of(self.keys, job.fields) if job.field(UNIQUE_KEY) else None
        if lock:
            self.waiting.append((job.entry_id, lock, job.job_id))
        else:
            acks.append(job.entry_id)

    async def send(self, scripts: Scripts, consumer: str, stale: StaleSettles) -> None:
        """Acknowledge each with its key's release (fenced, as every ack: a stale one is dropped and said);
        taken whole first (flushes of several tasks may overlap), what was not sent stays for the next."""
        waiting, self.waiting = self.waiting, []
        while waiting:
            entry_id, lock, job_id = waiting[0]
            try:
                acked = await scripts.ack_unique(consumer, entry_id, lock, job_id)
            except BaseException:
                self.waiting[:0] = waiting
                raise
            waiting.pop(0)
            if not acked:
                stale.dropped("ack", [entry_id])


async def lock_of_entry(redis: Any, keys: Keys, entry_id: str, episode: Episode) -> str | None:
    """The unique lock of an entry never parsed here (poison), from its ``unique_key`` field; None without.
    Read as a kept outcome's move is (``episode``): a lost connection waits instead of leaving the entry
    pending."""

    async def read() -> str | None:
        found: Any = await redis.xrange(keys.jobs, entry_id, entry_id)
        fields = {text(k): text(v) for k, v in (found[0][1] if found else {}).items()}
        return lock_of(keys, fields) if "kind" in fields else None

    return await episode.land(outcome_key(keys, entry_id), read)
