"""What a worker runs at once: its slots, the reads that hold one, and running an entry alone.

The read loop (:mod:`worker.loop.rotation`), the chores (:mod:`worker.loop.upkeep`)
and the runner (:mod:`worker.loop.runner`) share this one object instead of
reaching into each other: the loop asks how many slots are free and starts
entries in them; a slot frees itself when its entry is done
(:meth:`Slots.free`), which wakes the loop; the reclaim chore runs a suspect
entry with nothing else in flight (:meth:`Slots.run_alone`); the claim
refresher reads when each entry started.

A slot is keyed by (partition, entry id): ids of different partitions may be
equal. A read that waits for new entries of an idle partition holds a slot
too (:meth:`Slots.hold`), so that what it returns has a slot to run in.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, Protocol

Raw = dict[bytes, bytes]
Entries = list[tuple[str, Raw]]


class Partition(Protocol):
    """What the slots and the rotation need of a partition (:class:`worker.loop.partition_reader.PartitionReader`)."""

    index: int
    stream: str
    waiting: asyncio.Task[Entries] | None
    failures: int

    @property
    def where(self) -> str:
        """``host:port`` of the node serving the partition on a cluster, "" on a single server (log lines)."""
        ...

    async def read(self, count: int, block: bool = True) -> Entries: ...


#: An entry to run alone: its partition, its id, and the claim that takes it (its fields, or None).
Suspect = tuple[Partition, str, Callable[[], Awaitable[Raw | None]]]

#: Runs one entry in a slot and frees the slot when done (:meth:`worker.loop.runner.Worker.run_entry`).
RunEntry = Callable[[Any, str, Raw, bool], Coroutine[Any, Any, None]]


class Slots:
    """The worker's ``capacity`` job slots: what is in flight, since when, and who waits for a free one."""

    def __init__(self, capacity: int, run_entry: RunEntry) -> None:
        self.capacity = capacity
        self._run_entry = run_entry
        self.inflight: dict[tuple[int, str], asyncio.Task[None]] = {}
        self.started_at: dict[tuple[int, str], float] = {}
        self.held: set[asyncio.Task[Any]] = set()
        """Reads (and rests after a failed read) that hold a slot until the loop took what they returned."""
        self.freed = asyncio.Event()
        """Set when a slot frees or a held read returns: the loop waits on it when it cannot read."""
        self.reading = asyncio.Lock()
        """Held by the loop while it starts entries (read, or returned by a waiting read), and by
        :meth:`run_alone`."""

    @property
    def free(self) -> int:
        """Slots neither running an entry nor held by a read."""
        return self.capacity - len(self.inflight) - len(self.held)

    def start(self, part: Partition, entry_id: str, raw: Raw, alone: bool = False) -> asyncio.Task[None]:
        """Run ``entry_id`` of ``part`` in a slot of its own (the entry's runner frees it)."""
        slot = (part.index, entry_id)
        task = asyncio.create_task(self._run_entry(part, entry_id, raw, alone))
        self.inflight[slot] = task
        self.started_at[slot] = time.monotonic()
        return task

    def free_slot(self, index: int, entry_id: str) -> None:
        """The entry's runner is done with its slot: forget it and wake the loop."""
        slot = (index, entry_id)
        self.inflight.pop(slot, None)
        self.started_at.pop(slot, None)
        self.freed.set()

    def hold(self, task: asyncio.Task[Any]) -> None:
        """``task`` (a waiting read, a rest) holds a slot until the loop has started what it returned
        (:meth:`release`); the loop wakes when it is done."""
        self.held.add(task)
        task.add_done_callback(self._wake)

    def release(self, task: asyncio.Task[Any]) -> None:
        """The loop took what the held ``task`` returned (and started its entries, if any)."""
        self.held.discard(task)

    def _wake(self, _task: asyncio.Task[Any]) -> None:
        self.freed.set()

    async def wait_freed(self) -> None:
        """Wait until a slot frees or a held read returns (since the loop last cleared :attr:`freed`), then let
        the other jobs that are ready finish too, so that the next read fills many slots in one round trip
        instead of one slot per round trip."""
        await self.freed.wait()
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    async def _until_quiet(self) -> None:
        """Wait until no entry runs and no held read could still return one (what a returned read got
        starts only under the read lock, so after :meth:`run_alone`)."""
        while self.inflight or any(not task.done() for task in self.held):
            self.freed.clear()
            await self.freed.wait()

    async def run_alone(self, suspects: Iterable[Suspect]) -> int:
        """Claim each suspect (``claim()``: its fields, or None when it is no longer to be had) and run it
        with nothing else in flight in this worker: no job running, no read waiting that could return one.
        How many ran.

        The suspects run back to back under one hold of the read lock, so the
        loop reads nothing meanwhile and a batch does not wait a block time
        per entry; an innocent entry never runs beside a suspect, so a crash
        charges the suspect alone.
        """
        ran = 0
        async with self.reading:
            for part, entry_id, claim in suspects:
                await self._until_quiet()
                raw = await claim()
                if raw is None:
                    continue
                await asyncio.shield(self.start(part, entry_id, raw, alone=True))
                ran += 1
        return ran
