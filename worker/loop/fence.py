"""Settles that came too late: a worker whose claim was taken over changes nothing, and says so once.

Every settle (the batched ack, a retry, a dead letter, the ack of an entry
run alone or of a job holding a unique key, a paused kind's park, a
throttled job's deferral, a hand-back, and each of them kept by the episode
until it lands) carries the settling consumer's name into its script, which
checks that the entry is still pending and still this consumer's
(``lua/includes/owned.lua``) in the same call, so the fence costs no round
trip. When the check fails (this
worker's claim went idle past ``RECLAIM_IDLE_MS``, through a blocked loop or
a partition, and another worker's reclaim took the entry), the move changes
nothing: :class:`StaleSettles` counts it (the ``<ns>_settles_stale_total``
metric) and logs one WARNING for it; the other worker's outcome stands.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from worker.kinds import Job
from worker.store.scripts import Scripts
from worker.store.wire import text

log = logging.getLogger("worker")


class StaleSettles:
    """The settles of one partition's stream that the fence dropped (see the module docstring)."""

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self.count = 0
        """Settles dropped so far (one per entry)."""

    async def ack(self, scripts: Scripts, consumer: str, entry_ids: list[str]) -> None:
        """Acknowledge the ``entry_ids`` (``ack.lua``, outside the hot path: an entry run alone, the drain);
        the stale ones are dropped here."""
        if entry_ids:
            stale: Any = await scripts.ack(consumer, entry_ids)
            self.dropped("ack", [text(entry_id) for entry_id in stale])

    def dropped(self, settle: str, entry_ids: Sequence[str], job: Job | None = None) -> None:
        """``settle`` ("ack", "retry", "dead letter", "park", "deferral", "hand-back") of ``entry_ids`` (of
        ``job``) did not land: the entries are no longer this worker's. One line for the lot."""
        if not entry_ids:
            return
        self.count += len(entry_ids)
        shown = ", ".join(entry_ids[:5]) + (f" and {len(entry_ids) - 5} more" if len(entry_ids) > 5 else "")
        log.warning(
            "Dropped the %s of %s%s on %s: no longer this worker's (its claim went idle past RECLAIM_IDLE_MS and "
            "another worker took it over, or recorded it); the other worker's outcome stands.",
            settle,
            f"job {job.kind} {job.job_id} " if job else "",
            f"entry {shown}" if len(entry_ids) == 1 else f"entries {shown}",
            self.stream,
        )
