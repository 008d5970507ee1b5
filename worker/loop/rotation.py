"""The read loop: the turn over a worker's partitions, and the reads that wait.

One loop serves one partition or several (``QUEUE_PARTITIONS``, and each
queue of ``WORKER_QUEUES`` has its own); one partition is its N=1 case. Which
partition's turn it is, by the queues' weights or in strict order, is
:class:`~worker.loop.queue_turn.QueueTurn`'s. It reads like a checklist: stopping? which
partition's turn? how many free slots? read at most that many entries (the
partition's pending acknowledgements ride in the same round trip) and start
each in a slot (:class:`worker.loop.slots.Slots`).

With one partition each read blocks, for all the free slots, up to the block
time: one round trip per batch, as fast as the queue allows. With several,
the partitions that had entries are read in turn without blocking, each for
all the free slots, so a busy partition gets its turn and then the next one
does and none starves another; a partition a read found empty leaves the
turn and waits in a blocking read of one entry of its own (on its own
connection, its node's on a cluster), holding one slot so that what it
returns has a slot to run in; it rejoins the turn when that read returns.

Each read also fetches entries ahead of the free slots
(:class:`~worker.loop.read_ahead.ReadAhead` says how many): they start as
slots free, without a round trip, and while the slots are busy a read that
does not block tops the buffer up once it is half used. A top-up read that
finds nothing waits for the next read the slots need.

A partition whose read fails (its server or node away) rests out of the turn
with backoff, holding a slot, while any others are served; its first loss
and its return are logged once each. A read Redis refuses (``MISCONF``
refuses XREADGROUP) rests the same way and joins the episode of refused
writes (:mod:`worker.loop.episode`), which speaks for it. A lost consumer
group is created again.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis.exceptions

from worker.loop.chores import sleep_or_stop
from worker.loop.episode import RETRY_CAP_S, Episode
from worker.loop.node_connection import REDIRECTIONS, describe
from worker.loop.partition_reader import read_error
from worker.loop.queue_turn import QueueTurn
from worker.loop.read_ahead import ReadAhead
from worker.loop.slots import Partition, Slots
from worker.store.reconnect import CAP_S, backoff_s
from worker.store.refusals import refusal_code

log = logging.getLogger("worker")


class Rotation:
    """The read loop over ``parts`` (see the module docstring), starting entries in ``slots`` until ``stopping``.

    ``recreate_group()`` creates a consumer group that went away; with
    ``drained`` (burst mode), the loop ends once a read found nothing and
    ``drained()`` says the queue holds no more work.
    """

    def __init__(
        self,
        slots: Slots,
        parts: Sequence[Partition] | QueueTurn[Partition],
        stopping: asyncio.Event,
        *,
        recreate_group: Callable[[], Awaitable[None]],
        drained: Callable[[], Awaitable[bool]] | None = None,
        episode: Episode | None = None,
        rng: random.Random | None = None,
        read_ahead: ReadAhead | None = None,
    ) -> None:
        self.slots = slots
        self.turn = parts if isinstance(parts, QueueTurn) else QueueTurn(parts)
        """Whose turn it is to be read: the served queues by weight or in order (:mod:`worker.loop.queue_turn`)."""
        self.parts: Sequence[Partition] = self.turn.parts
        self.stopping = stopping
        self.recreate_group = recreate_group
        self.drained = drained
        self.episode = episode or Episode()
        self.rng = rng or random.Random()
        self.block = len(self.parts) == 1
        """One partition: each read blocks for all the free slots (no read of its own waits beside the loop)."""
        self.read_ahead = read_ahead or ReadAhead()
        self._dry = False
        """A top-up read found nothing: the next read is one the free slots need."""

    async def consume(self) -> None:
        """Read and start entries until stopped (or, with ``drained``, until the queue is drained).

        Each turn holds the read lock while it starts what the waiting reads
        returned and reads the next partition, so that nothing starts while
        :meth:`Slots.run_alone` runs a suspect.
        """
        slots = self.slots
        quiet = False
        while not self.stopping.is_set():
            slots.freed.clear()
            if quiet and await self._drained():
                log.info("Burst mode: the queue is drained; exiting.")
                break
            async with slots.reading:
                if self.stopping.is_set():
                    break
                quiet = await self._collect_waits()
                slots.start_ahead()
                free, count = slots.free, self._top_up()
                part = self._next_turn() if free > 0 or count > 0 else None  # a turn is taken only to read
                if part is not None:
                    ahead = self.turn.share(part, count)  # a low-weight queue reads ahead its share only
                    quiet = await self._read(part, free, free + ahead if free > 0 else ahead) or quiet
            if part is None:
                await slots.wait_freed()  # a slot freed, or a waiting read returned
        await self._end_waits()

    def _top_up(self) -> int:
        """How many entries to read ahead now: the target less what is ahead, once half of it is used
        (none after a top-up read found nothing, until the slots need a read)."""
        target, ahead = self.read_ahead.target, len(self.slots.ahead)
        self.slots.low_water = target // 2
        if self._dry or ahead * 2 > target or self.slots.troubles:
            return 0
        return target - ahead

    async def _read(self, part: Partition, free: int, count: int) -> bool:
        """Read up to ``count`` entries of ``part``, start ``free`` of them and keep the rest ahead; True
        when a blocking read found nothing (its block time passed). With free slots (nothing is ahead
        then) the read blocks with one partition; a partition found empty in the turn waits in a read of
        its own. A top-up read (no free slot) never blocks."""
        sent = time.monotonic()
        try:
            entries = await part.read(count, block=self.block and free > 0)
        except Exception as exc:
            if not read_error(exc):
                raise
            await self._partition_failed(part, exc)
            return False
        now = time.monotonic()
        self.turn.charge(part, len(entries))
        self.read_ahead.note(len(entries), sent, now)
        self.slots.take(part, entries, now)
        if part.failures:
            part.failures = 0
            if f"read {part.stream}" in self.episode.troubles:
                self.episode.accepted(f"read {part.stream}")
            else:
                log.info("Reconnected to Redis%s.", f" (node {part.where})" if part.where else "")
        self._dry = not entries and not free
        if entries or not free:
            return False
        if self.block:
            return True
        self._wait_in(part)
        return False

    async def _drained(self) -> bool:
        """Burst mode's exit test, asked only when nothing runs."""
        slots = self.slots
        return self.drained is not None and not slots.inflight and not slots.ahead and await self.drained()

    def _next_turn(self) -> Partition | None:
        """The partition whose turn it is, not waiting in a blocking read or resting (None: all are)."""
        return self.turn.next()

    def _wait_in(self, part: Partition) -> None:
        """Start ``part``'s one-entry blocking read, holding a slot; the loop wakes when it returns."""
        part.waiting = asyncio.create_task(part.read(1))
        self.slots.hold(part.waiting)

    async def _collect_waits(self) -> bool:
        """Start the entries of the waiting reads that returned; their partitions rejoin the turn.
        True when one returned nothing (its block time passed)."""
        quiet = False
        for part in self.parts:
            task = part.waiting
            if task is None or not task.done():
                continue
            part.waiting = None
            self.slots.release(task)
            if task.cancelled():
                continue
            failed = task.exception()
            if failed is not None:
                await self._partition_failed(part, failed)
                continue
            entries = task.result()
            quiet = quiet or not entries
            self.turn.charge(part, len(entries))
            for entry_id, raw in entries:
                self.slots.start(part, entry_id, raw)
        return quiet

    async def _partition_failed(self, part: Partition, exc: BaseException) -> None:
        """A read of ``part`` failed: create a lost group again, or let the partition rest out of the turn
        with backoff (its first loss logged) while any others are served. Another error is raised."""
        if not read_error(exc):
            raise exc
        refused = refusal_code(exc) not in (None, "timeout")
        if refused:
            self.episode.refused(f"read {part.stream}", exc)  # MISCONF refuses reads too (XREADGROUP writes)
        elif isinstance(exc, redis.exceptions.ResponseError) and not isinstance(exc, REDIRECTIONS):
            if "NOGROUP" not in str(exc):
                raise exc
            log.warning("The consumer group is gone (Redis lost its data?); creating it again.")
            await self.recreate_group()
            return
        part.failures += 1
        if part.failures == 1 and not refused:
            log.warning(
                "Lost the connection to Redis for %s (%s); reconnecting with backoff.", part.stream, describe(exc)
            )
        rest_s = backoff_s(part.failures, cap_s=RETRY_CAP_S if refused else CAP_S, rng=self.rng)

        async def rest() -> list[Any]:
            await sleep_or_stop(rest_s, self.stopping)
            return []

        part.waiting = asyncio.create_task(rest())
        self.slots.hold(part.waiting)

    async def _end_waits(self) -> None:
        """On the way out: let the waiting reads return (within the block time) and run what they got."""
        waits = [part.waiting for part in self.parts if part.waiting is not None]
        if not waits:
            return
        await asyncio.wait(waits)
        for part in self.parts:  # what they got runs; a failed read left its entries pending
            task = part.waiting
            part.waiting = None
            if task is None:
                continue
            self.slots.release(task)
            if not task.cancelled() and task.exception() is None:
                for entry_id, raw in task.result():
                    self.slots.start(part, entry_id, raw)
