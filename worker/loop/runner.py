"""The worker's life: its partitions, slots, read loop and chores put together; start, stop, drain.

The read loop (:mod:`worker.loop.rotation`, one partition or several) starts
entries in the worker's :class:`~worker.loop.slots.Slots`; everything else is
a timed chore beside it (:mod:`worker.loop.upkeep`).

A slot runs its entry in the :class:`~worker.loop.executor.Executor`, which
never raises: it returns after the handler succeeded (the entry is
acknowledged in the next batch), or :mod:`worker.loop.outcomes` has put the
job in ``delayed`` with attempts + 1 (retry script: ZADD + XACK) or
dead-lettered it (bury script: XADD dead + XACK). An entry delivered before
(reclaimed from a dead process) runs alone and is acknowledged at once, so an
innocent neighbour of a crasher never drifts toward the poison limit.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable

import redis.asyncio as aioredis
import redis.exceptions

from worker.app import Chore
from worker.kinds import Registry
from worker.loop.attempt import SHUTDOWN
from worker.loop.cancels import CancelWatch
from worker.loop.chores import run_chore
from worker.loop.declare import declare_chore
from worker.loop.episode import Episode
from worker.loop.executor import Executor
from worker.loop.fair_feeder import FairFeeder
from worker.loop.gate import Gate
from worker.loop.handback import Fleet
from worker.loop.observe import Tally
from worker.loop.outcomes import Outcomes
from worker.loop.partition_reader import PartitionReader, give_back
from worker.loop.queue_turn import QueueTurn
from worker.loop.read_ahead import ReadAhead
from worker.loop.rotation import Rotation
from worker.loop.slots import Partition, Slots
from worker.loop.tracing import traced
from worker.loop.unfinished import give_back_unfinished
from worker.loop.upkeep import Upkeep
from worker.observability.observer import Observer
from worker.settings import Settings
from worker.store.keys import GROUP, Keys
from worker.store.partitions import partition_keys, served_keys
from worker.store.queues import describe_served
from worker.store.reconnect import lost_connection
from worker.store.scripts import Scripts

log = logging.getLogger("worker")


class Worker:
    """One consumer in group ``workers``: its slots, its read loop (:attr:`rotation`) and chores (:attr:`upkeep`).

    What became of each entry is its partition's :class:`Outcomes`' business
    (:attr:`parts`).
    """

    def __init__(
        self,
        redis_client: aioredis.Redis,
        settings: Settings,
        registry: Registry,
        *,
        burst: bool = False,
        chores: Iterable[Chore] = (),
        observers: Iterable[Observer] = (),
        more_work: Iterable[Callable[[], Awaitable[bool]]] = (),
    ) -> None:
        self.redis = redis_client
        self.settings = settings
        self.registry = registry
        self.burst = burst
        self.name = settings.worker_name
        self.keys = Keys(settings.prefix)
        """The queue-wide keys (heartbeats); each partition's are its reader's."""
        self.tally = Tally()
        self.extra_chores = list(chores)
        self.more_work = list(more_work)
        self.stopping = asyncio.Event()
        self.episode = Episode()
        """Redis refusing writes: decided outcomes kept until they land (:mod:`worker.loop.episode`)."""
        self._rng = random.Random()
        block_ms = min(settings.block_ms, 50) if burst else settings.block_ms
        observing = [self.tally, *observers]
        served = served_keys(settings)
        self.parts = [self._partition(keys, observing, block_ms, index) for index, keys in enumerate(served)]
        paused_at = partition_keys(settings)[0]  # pauses are written to every queue, read from default's
        self.gate = Gate(redis_client, self.keys, paused_at, registry, wake=self._promote_soon)
        self.fleet = Fleet(redis_client, self.keys, settings.unknown_kind_grace_s)
        self.executor = Executor(
            registry,
            self.gate,
            observing,
            threads=settings.concurrency,
            field_limits=(settings.max_field_bytes, settings.max_job_bytes),
            stop_grace_s=settings.stop_grace_s,
            fleet=self.fleet,
        )
        self.traced, run = traced(self.executor.run, self.keys.jobs)  # with an OpenTelemetry SDK, each in its span
        self.slots = Slots(settings.concurrency, run, self.episode.troubles, self.stopping)
        self.feeders = [FairFeeder(redis_client, part.keys, self.slots) for part in self.parts]
        for part, feeder in zip(self.parts, self.feeders, strict=True):
            part.fair = feeder
        beside = (self.slots, self.parts, self.stopping, self.tally)
        self.upkeep = Upkeep(redis_client, settings, *beside, episode=self.episode, overdue=self.executor.overdue)
        self.cancels = CancelWatch(redis_client, self.parts, self.slots, self.executor)  # opslib.cancel's
        turn: QueueTurn[Partition] = QueueTurn(self.parts, settings.queues, strict=settings.queue_order == "strict")
        self.rotation = Rotation(
            self.slots,
            turn,
            self.stopping,
            recreate_group=self.ensure_group,
            episode=self.episode,
            drained=self._drained if burst else None,
            rng=self._rng,
            read_ahead=ReadAhead(settings.prefetch, settings.reclaim_idle_ms),
        )

    def _partition(self, keys: Keys, observing: list[Observer], block_ms: int, index: int) -> PartitionReader:
        """One partition's reader, with its scripts and the :class:`Outcomes` that record what its entries became."""
        scripts = Scripts(self.redis, keys, wait_replicas=self.settings.wait_replicas)
        outcomes = Outcomes(
            self.redis,
            scripts,
            self.settings,
            observing,
            promote_soon=functools.partial(self._promote_soon, scripts),
            episode=self.episode,
            rng=self._rng,
        )
        return PartitionReader(self.redis, outcomes, self.name, block_ms, index)

    def _promote_soon(self, scripts: Scripts, delay_s: float) -> None:
        self.upkeep.promote_soon(scripts, delay_s)

    # ------------------------------------------------------------------ loop

    async def run(self) -> None:
        """Consume until stopped (or, in burst mode, until the queue is drained)."""
        await self.ensure_group()
        log.info(
            "Worker %s started: %d slots, queues %s (%s), kinds %s.",
            self.name,
            self.settings.concurrency,
            describe_served(self.settings.queues),
            self.settings.queue_order,
            ", ".join(sorted(self.registry.kinds)) or "none",
        )
        if 1 < len(self.parts) > self.settings.concurrency:
            log.warning(
                "WORKER_CONCURRENCY=%d is below the %d partitions it reads (QUEUE_PARTITIONS times the queues of "
                "WORKER_QUEUES): an idle partition waits for new entries "
                "in a read that holds a slot, so partitions take turns at the block time; give each a slot.",
                self.settings.concurrency,
                len(self.parts),
            )
        await self.gate.refresh()
        chores = [asyncio.create_task(run_chore(c, self.stopping, self.episode)) for c in self.chores()]
        chores.append(asyncio.create_task(self.cancels.listen()))
        try:
            await self.rotation.consume()
        finally:
            self.stopping.set()
            await self._drain()
            for task in chores:
                task.cancel()
            await asyncio.gather(*chores, return_exceptions=True)
            await self._goodbye()
            self.executor.shutdown()
            self.upkeep.log_summary()

    def outcomes_waiting(self) -> int:
        """Outcomes decided but kept until Redis takes them again (the metrics' gauge)."""
        return self.episode.waiting

    def stop(self) -> None:
        """Stop reading; running jobs get ``SHUTDOWN_GRACE_S`` to finish."""
        if not self.stopping.is_set():
            log.info("Worker %s is stopping: no new reads, running jobs may finish.", self.name)
        self.stopping.set()
        self.slots.freed.set()

    def chores(self) -> list[Chore]:
        """The worker's own timed chores (:mod:`worker.loop.upkeep`), then the caller's (scheduler, relay, metrics)."""
        served = [queue.name for queue in self.settings.queues]
        declare = declare_chore(self.redis, self.keys, self.name, self.registry, self.tally, served)
        cancels = Chore("check-cancels", max(0.05, self.settings.reclaim_idle_ms / 3000), self.cancels.check)
        own = [cancels, self.gate.chore(), declare, self.fleet.chore(), *(f.chore() for f in self.feeders)]
        return [*self.upkeep.chores(), *own, *self.extra_chores]

    async def ensure_group(self) -> None:
        """Create group ``workers`` on each partition's ``jobs`` (and the stream) unless it exists."""
        for part in self.parts:
            try:
                await self.redis.xgroup_create(part.keys.jobs, GROUP, id="0", mkstream=True)
            except redis.exceptions.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    async def _drained(self) -> bool:
        """Burst mode's exit test: nothing in flight, pending, undelivered, delayed, throttled or fair (a paused
        kind's parked jobs wait for resume, not for this worker),
        and no ``more_work`` check (a lifespan's, e.g. unpublished outbox rows) says otherwise.

        The checks run before Redis is read: work they see end up in ``jobs`` or
        ``delayed`` before they turn false, and the undelivered test catches an
        entry a chore (relay, promote) added since the last read.
        """
        if self.slots.inflight or self.slots.ahead:
            return False
        for check in self.more_work:
            if await check():
                return False
        for part in self.parts:
            await part.outcomes.flush_kept("acks")
        pipe = self.redis.pipeline(transaction=False)
        for part in self.parts:
            pipe.xpending(part.keys.jobs, GROUP)
            pipe.zcard(part.keys.delayed)
            pipe.xinfo_stream(part.keys.jobs)
            pipe.xinfo_groups(part.keys.jobs)
            pipe.zcard(part.keys.throttled)
            pipe.zcard(part.keys.fair_queue)
        replies = await pipe.execute()
        for n in range(0, len(replies), 6):
            pending, delayed, stream, groups, throttled, fair = replies[n : n + 6]
            delivered = next((g["last-delivered-id"] for g in groups if g["name"] in (GROUP, GROUP.encode())), None)
            undelivered = stream["length"] > 0 and delivered != stream["last-generated-id"]
            if int(pending["pending"]) or int(delayed) or int(throttled) or int(fair) or undelivered:
                return False
        return True

    async def _drain(self) -> None:
        """On stop: what was read ahead runs as slots free (else it is given back), running jobs and outcomes
        kept through an episode get ``SHUTDOWN_GRACE_S``; the handlers still running are then told to stop and
        get ``STOP_GRACE_S``; the acknowledgements are sent, and the jobs told to stop are given back for
        another worker (:mod:`worker.loop.unfinished`). What is left stays pending for reclaim once idle (as a
        dead process's entries do), said in one line."""
        grace_s = self.settings.shutdown_grace_s
        deadline = time.monotonic() + grace_s
        await give_back(self.parts, await self.slots.run_out_ahead(deadline))  # what was read ahead
        inflight = self.slots.inflight
        left: set[asyncio.Task[None]] = set()
        if inflight:
            log.info("Waiting up to %.0f s for %d running jobs.", grace_s, len(inflight))
            timeout = max(0.0, deadline - time.monotonic())
            _done, left = await asyncio.wait(list(inflight.values()), timeout=timeout)
        kept, reason = self.episode.waiting, self.episode.reason
        if left:
            left = await self._stop_running(left)
        stop_deadline = time.monotonic() + 1.0
        unsent = 0
        for part in self.parts:
            try:
                await asyncio.wait_for(part.outcomes.flush_kept("acks"), max(0.5, stop_deadline - time.monotonic()))
            except Exception as exc:
                if not (lost_connection(exc) or isinstance(exc, redis.exceptions.RedisError)):
                    raise
                unsent += len(part.outcomes.acks)
        given = await give_back_unfinished(self.parts, self.executor, grace_s)
        if len(left) > given or unsent or kept:
            log.warning(
                "%d jobs did not finish within SHUTDOWN_GRACE_S=%g s, and %d outcomes and %d acknowledgements "
                "were not recorded%s: their entries are left pending, for reclaim to run again.",
                max(0, len(left) - given),
                grace_s,
                kept,
                unsent,
                f" (Redis refuses writes: {reason})" if reason else "",
            )

    async def _stop_running(self, left: set[asyncio.Task[None]]) -> set[asyncio.Task[None]]:
        """The grace is over: tell the handlers still running to stop, give them ``STOP_GRACE_S``; cancel what
        runs no handler (an outcome waiting for Redis). The tasks that have not ended."""
        stop_s = self.settings.stop_grace_s
        told = self.executor.stop_all(SHUTDOWN)
        log.info("Told %d running jobs to stop (job.stopping); they have STOP_GRACE_S=%g s.", len(told), stop_s)
        _done, left = await asyncio.wait(left, timeout=stop_s)
        inflight = self.slots.inflight
        handling = {inflight[key] for key in self.executor.running if key in inflight}
        cancelled = left - handling
        for task in cancelled:
            task.cancel()
        if cancelled:  # half a second to unwind; a handler that ignored its stop is not waited for again
            _done, still = await asyncio.wait(cancelled, timeout=0.5)
            left = (left & handling) | still
        return left

    async def _goodbye(self) -> None:
        for part in self.parts:
            await part.node.release()
        await self.upkeep.stop_heartbeat()
