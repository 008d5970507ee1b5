"""The fair feeder: one partition's ``jobs`` kept topped up from its ``fair:queue`` (:mod:`worker.store.fair`).

One :class:`FairFeeder` per partition of a served queue, built from that
partition's :class:`~worker.store.keys.Keys`, runs as a chore of the worker.
While fair jobs wait it is *active*: each read of the partition that returned
entries wakes it (:meth:`FairFeeder.note`, called by the read loop), and it runs
``fair_dispatch.lua`` once for however many reads came meanwhile, which moves
the jobs of the earliest turns onto ``jobs`` until it holds the worker's free
capacity of undelivered entries (its slots less what it already read ahead), so
``jobs`` never holds a deep backlog and a new key's job is never far from the
front. While none wait it is *idle*: it asks Redis once a second
(:data:`IDLE_CHECK_S`, one ZCARD inside the script), and a read that returns an
entry with a fair key wakes it at once (``fair_enqueue.lua`` puts a job straight
onto an empty ``jobs``, so a blocked read returns it).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from worker.app import Chore
from worker.loop.slots import Entries, Slots
from worker.store.fair import FAIR_FIELD
from worker.store.keys import Keys
from worker.store.scripts import Scripts

FAIR_FIELD_BYTES = FAIR_FIELD.encode()

#: How often an idle feeder asks whether fair jobs wait (seconds).
IDLE_CHECK_S = 1.0
#: The longest an active feeder waits for a read before it tops ``jobs`` up anyway (seconds).
ACTIVE_CHECK_S = 0.1
#: The most entries of ``jobs`` one dispatch spills into ``fair:queue`` (a deep plain backlog takes several).
SPILL_BATCH = 500


class FairFeeder:
    """Moves one partition's fair jobs onto its ``jobs`` as the worker's reads take them (module docstring)."""

    def __init__(self, redis: Any, keys: Keys, slots: Slots) -> None:
        self.keys = keys
        self.scripts = Scripts(redis, keys)
        self.slots = slots
        self.active = False
        """Fair jobs waited at the last dispatch (or a read returned one since)."""
        self.wake = asyncio.Event()

    def note(self, entries: Entries) -> None:
        """The read loop read ``entries`` from this partition: top ``jobs`` up again if fair jobs wait."""
        if self.active:
            if entries:
                self.wake.set()
        elif any(FAIR_FIELD_BYTES in fields for _entry_id, fields in entries):
            self.active = True
            self.wake.set()

    def target(self) -> int:
        """How many undelivered entries ``jobs`` should hold: the slots, less what is read ahead (at least 1)."""
        return max(1, self.slots.capacity - len(self.slots.ahead))

    async def feed(self) -> float:
        """Wait for a read (or the check's time), then dispatch; again at once while a spill goes on."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wake.wait(), ACTIVE_CHECK_S if self.active else IDLE_CHECK_S)
        self.wake.clear()
        while True:
            _moved, spilled, waiting = await self.scripts.fair_dispatch(self.target(), SPILL_BATCH)
            self.active = int(waiting) > 0
            if int(spilled) < SPILL_BATCH:
                return 0.0

    def chore(self) -> Chore:
        """The feeder as a worker chore (errors logged and retried with backoff like every chore's)."""
        return Chore(f"fair-feed {self.keys.jobs}", IDLE_CHECK_S, self.feed, jitter=0.0)
