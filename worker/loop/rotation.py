"""Consuming several partitions fairly: the turn over the partitions, and the reads that wait.

With ``QUEUE_PARTITIONS`` > 1 the worker's loop (:mod:`worker.loop.runner`) hands
its reading to a :class:`Rotation`: the partitions that had entries are read
in turn, and an empty one waits in a blocking read of its own. With one
partition the loop reads as it always did, without this.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import redis.exceptions

from worker.loop.chores import sleep_or_stop
from worker.loop.node_connection import REDIRECTIONS, describe
from worker.loop.partition_reader import READ_ERRORS, PartitionReader
from worker.store.reconnect import backoff_s

if TYPE_CHECKING:
    from worker.loop.runner import Worker

log = logging.getLogger("worker")


class Rotation:
    """The turn over a worker's partitions (see :meth:`consume`)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self._turn = 0

    async def consume(self) -> None:
        """Consume every partition fairly.

        The partitions that had entries are read in turn, without blocking,
        each for all the free slots: a busy partition gets its turn and then
        the next one does, so none starves another. A partition a read found
        empty leaves the turn and waits in a blocking read of one entry (which
        holds one slot, so that the entry it returns has a slot to run in); it
        rejoins the turn when that read returns an entry, or, when the block
        time passes, to be read once more. Only the transition costs a round
        trip that returns nothing: an idle partition waits in its own read,
        on its own connection (its node's, on a cluster), while the others
        are served. A partition whose node is away rests out of the turn
        with backoff (:meth:`_partition_failed`) while the others go on.
        """
        while not self.worker.stopping.is_set():
            self.worker._slot_freed.clear()
            quiet = await self._collect_waits()
            if quiet and self.worker.burst and not self.worker.inflight and await self.worker._drained():
                log.info("Burst mode: the queue is drained; exiting.")
                break
            part = self._next_turn()
            free = self.worker.settings.concurrency - len(self.worker.inflight) - self._waiting()
            if part is None or free <= 0:
                await self.worker._slot_freed.wait()  # a slot freed, or a waiting read returned
                await asyncio.sleep(0)
                await asyncio.sleep(0)
                continue
            try:
                async with self.worker._reading:
                    if self.worker.stopping.is_set():
                        break
                    entries = await part.read(free, block=False)
                    for entry_id, raw in entries:
                        self.worker._start(part, entry_id, raw)
            except READ_ERRORS as exc:
                await self._partition_failed(part, exc)
                continue
            if part.failures:
                self.worker._reconnected(part)
                part.failures = 0
            if not entries:
                self._wait_in(part)
        await self._end_waits()

    def _next_turn(self) -> PartitionReader | None:
        """The next partition in turn that is not waiting in a blocking read (None: all are)."""
        count = len(self.worker.parts)
        for step in range(count):
            part = self.worker.parts[(self._turn + step) % count]
            if part.waiting is None:
                self._turn = (self._turn + step + 1) % count
                return part
        return None

    def _waiting(self) -> int:
        """The slots held by waiting reads."""
        return sum(part.waiting is not None for part in self.worker.parts)

    def _wait_in(self, part: PartitionReader) -> None:
        """Start ``part``'s one-entry blocking read; the loop wakes when it returns."""
        part.waiting = asyncio.create_task(part.read(1))
        part.waiting.add_done_callback(lambda _task: self.worker._slot_freed.set())

    async def _collect_waits(self) -> bool:
        """Start the entries of the waiting reads that returned; their partitions rejoin the turn.
        True when one returned nothing (its block time passed)."""
        quiet = False
        for part in self.worker.parts:
            task = part.waiting
            if task is None or not task.done():
                continue
            part.waiting = None
            if task.cancelled():
                continue
            failed = task.exception()
            if failed is not None:
                await self._partition_failed(part, failed)
                continue
            entries = task.result()
            quiet = quiet or not entries
            for entry_id, raw in entries:
                self.worker._start(part, entry_id, raw)
        return quiet

    async def _partition_failed(self, part: PartitionReader, exc: BaseException) -> None:
        """A read of ``part`` failed: recreate a lost group, or let the partition rest out of the turn
        with backoff (its first loss logged) while the others are served. Another error is raised."""
        if not isinstance(exc, READ_ERRORS):
            raise exc
        if isinstance(exc, redis.exceptions.ResponseError) and not isinstance(exc, REDIRECTIONS):
            await self.worker._read_failed(exc, 0)
            return
        part.failures += 1
        if part.failures == 1:
            log.warning(
                "Lost the connection to Redis for %s (%s); reconnecting with backoff.", part.keys.jobs, describe(exc)
            )
        rest_s = backoff_s(part.failures, rng=self.worker._rng)

        async def rest() -> list[Any]:
            await sleep_or_stop(rest_s, self.worker.stopping)
            return []

        part.waiting = asyncio.create_task(rest())
        part.waiting.add_done_callback(lambda _task: self.worker._slot_freed.set())

    async def _end_waits(self) -> None:
        """On the way out: let the waiting reads return (within the block time) and run what they got."""
        waits = [part.waiting for part in self.worker.parts if part.waiting is not None]
        if waits:
            await asyncio.wait(waits)
            for part in self.worker.parts:  # what they got runs; a failed read left its entries pending
                task = part.waiting
                part.waiting = None
                if task is not None and not task.cancelled() and task.exception() is None:
                    for entry_id, raw in task.result():
                        self.worker._start(part, entry_id, raw)
