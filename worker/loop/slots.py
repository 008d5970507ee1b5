"""What a worker runs at once: its slots, the reads that hold one, and running an entry alone.

The read loop (:mod:`worker.loop.rotation`), the chores (:mod:`worker.loop.upkeep`)
and the worker (:mod:`worker.loop.runner`) share this one object instead of
reaching into each other: the loop asks how many slots are free and starts
entries in them; each runs in the executor (:mod:`worker.loop.executor`), and
its slot frees itself when the entry is done (:meth:`Slots.free_slot`), which
wakes the loop; the reclaim chore runs a suspect
entry with nothing else in flight (:meth:`Slots.run_alone`); the claim
refresher reads when each entry started.

A slot is keyed by (partition, entry id): ids of different partitions may be
equal. A read that waits for new entries of an idle partition holds a slot
too (:meth:`Slots.hold`), so that what it returns has a slot to run in.

Entries a read returned beyond the free slots wait in :attr:`Slots.ahead`
(read ahead, :mod:`worker.loop.read_ahead`) and start, oldest first, as slots
free (:meth:`Slots.start_ahead`), under the same read lock as the reads, so
that they too never start beside an entry run alone. They are pending and
ours from their read on: the claim refresher covers them as it covers running
entries (:meth:`Slots.claimed_before`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
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

#: Runs one entry in a slot, never raising (:meth:`worker.loop.executor.Executor.run`); the slot frees itself after.
RunEntry = Callable[[Any, str, Raw, bool], Coroutine[Any, Any, None]]


class Slots:
    """The worker's ``capacity`` job slots: what is in flight, since when, and who waits for a free one."""

    def __init__(
        self,
        capacity: int,
        run_entry: RunEntry,
        troubles: Mapping[str, float] | None = None,
        stopping: asyncio.Event | None = None,
    ) -> None:
        self.capacity = capacity
        self.stopping = stopping
        """The worker's stop: :meth:`run_alone` then lets go of the read lock (its entry runs on, drained)."""
        self._run_entry = run_entry
        self.inflight: dict[tuple[int, str], asyncio.Task[None]] = {}
        self.started_at: dict[tuple[int, str], float] = {}
        """When each running entry became ours (monotonic): its read, or its claim."""
        self.ahead: deque[tuple[Partition, str, Raw, float]] = deque()
        """Entries read ahead of the free slots, not started yet, oldest first, with when they were read."""
        self.held: set[asyncio.Task[Any]] = set()
        """Reads (and rests after a failed read) that hold a slot until the loop took what they returned."""
        self.freed = asyncio.Event()
        """Set when a slot frees or a held read returns: the loop waits on it when it cannot read."""
        self.quieting = 0
        """Non-zero while :meth:`run_alone` waits for quiet or runs its entry: no slot goes on to the next
        entry read ahead."""
        self.troubles: Mapping[str, float] = {} if troubles is None else troubles
        """While not empty (the worker's episode of refused writes, :mod:`worker.loop.episode`), what was
        read ahead waits: slots that free do not start it, so the loop reads for them (and notices a lost
        server) and a refusing Redis gets no new work from this worker beyond what the slots read."""
        self.low_water = 0
        """A slot that frees wakes the loop once no more than this many entries are left ahead (the loop
        tops the buffer up then)."""
        self.reading = asyncio.Lock()
        """Held by the loop while it starts entries (read, or returned by a waiting read), and by
        :meth:`run_alone`."""

    @property
    def free(self) -> int:
        """Slots neither running an entry nor held by a read."""
        return self.capacity - len(self.inflight) - len(self.held)

    def start(
        self, part: Partition, entry_id: str, raw: Raw, alone: bool = False, read_at: float = 0.0
    ) -> asyncio.Task[None]:
        """Run ``entry_id`` of ``part`` in a slot of its own (freed when it is done); ``read_at``: when it
        became ours (monotonic; default now)."""
        slot = (part.index, entry_id)
        run = self._run_alone(part, entry_id, raw) if alone else self._run_on(part, entry_id, raw)
        task = asyncio.create_task(run)
        self.inflight[slot] = task
        self.started_at[slot] = read_at or time.monotonic()
        return task

    async def _run_alone(self, part: Partition, entry_id: str, raw: Raw) -> None:
        try:
            await self._run_entry(part, entry_id, raw, True)
        finally:
            self.free_slot(part.index, entry_id)

    async def _run_on(self, part: Partition, entry_id: str, raw: Raw) -> None:
        """Run an entry; then, while entries wait :attr:`ahead` and no entry waits to run alone, the next
        one in the same task and slot: a job that never waits costs no task and no loop turn of its own."""
        task = asyncio.current_task()
        ahead, inflight, started_at = self.ahead, self.inflight, self.started_at
        while True:
            try:
                await self._run_entry(part, entry_id, raw, False)
            finally:
                self.free_slot(part.index, entry_id)
            if not ahead or self.quieting or self.troubles or task is None or self.free <= 0:
                return
            part, entry_id, raw, read_at = ahead.popleft()
            slot = (part.index, entry_id)
            inflight[slot] = task
            started_at[slot] = read_at

    def take(self, part: Partition, entries: Entries, read_at: float) -> None:
        """Start what the free slots take of ``entries`` (read at ``read_at``, one clock read for the batch)
        and keep the rest :attr:`ahead`."""
        free = self.free
        for entry_id, raw in entries[:free]:
            self.start(part, entry_id, raw, read_at=read_at)
        for entry_id, raw in entries[free:]:
            self.ahead.append((part, entry_id, raw, read_at))

    def start_ahead(self) -> None:
        """Start entries read ahead, oldest first, in the free slots (the caller holds :attr:`reading`)."""
        ahead = self.ahead
        if self.troubles:
            return
        for _ in range(min(self.free, len(ahead))):
            part, entry_id, raw, read_at = ahead.popleft()
            self.start(part, entry_id, raw, read_at=read_at)

    async def run_out_ahead(self, deadline: float) -> list[tuple[Partition, str, Raw, float]]:
        """On stop: start what was read ahead as slots free, until ``deadline`` (monotonic); return (and
        forget) what did not start."""
        while self.ahead and not self.troubles and time.monotonic() < deadline:
            self.freed.clear()
            async with self.reading:  # never beside an entry run alone
                self.start_ahead()
            if self.ahead:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.freed.wait(), max(0.0, deadline - time.monotonic()))
        return self.take_ahead()

    def take_ahead(self) -> list[tuple[Partition, str, Raw, float]]:
        """Forget what was read ahead and return it (to be given back for another worker)."""
        left, self.ahead = list(self.ahead), deque()
        return left

    def claimed_before(self, horizon: float) -> dict[int, list[str]]:
        """The ids, per partition index, of the entries ours since before ``horizon`` (monotonic): running
        or read ahead. The claim refresher keeps them from looking idle."""
        old: dict[int, list[str]] = {}
        for (partition, entry_id), since in list(self.started_at.items()):
            if since < horizon:
                old.setdefault(partition, []).append(entry_id)
        for part, entry_id, _raw, read_at in self.ahead:
            if read_at < horizon:
                old.setdefault(part.index, []).append(entry_id)
        return old

    def free_slot(self, index: int, entry_id: str) -> None:
        """The entry is done with its slot: forget it and wake the loop, unless the slot goes on
        to an entry read ahead and enough of them are left (more than :attr:`low_water`)."""
        slot = (index, entry_id)
        self.inflight.pop(slot, None)
        self.started_at.pop(slot, None)
        if len(self.ahead) <= self.low_water or self.quieting or self.troubles:
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
        self.quieting += 1
        try:
            async with self.reading:
                for part, entry_id, claim in suspects:
                    await self._until_quiet()
                    raw = await claim()
                    if raw is None:
                        continue
                    task = self.start(part, entry_id, raw, alone=True)
                    ran += 1
                    if not await self._alone_until_stop(task):
                        break
        finally:
            self.quieting -= 1
        return ran

    async def _alone_until_stop(self, task: asyncio.Task[None]) -> bool:
        """Wait for an entry run alone (never cancelling it); False when the worker stops first: the read
        loop needs the read lock to end, and the stop's drain waits for the entry or gives it back."""
        if self.stopping is None:
            await asyncio.shield(task)
            return True
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait([task, stop], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        return task.done()
