"""The consumer loop: read, hand each entry to a slot, acknowledge, drain on stop.

The loop reads like a checklist: stopping? how many free slots? read at most
that many entries (the pending acknowledgements ride in the same round trip),
hand each entry to a slot. Everything else is a timed chore beside it
(:mod:`worker.loop.upkeep`).

A slot runs :meth:`Worker.run_entry`, which never raises: it returns after
the handler succeeded (the entry is acknowledged in the next batch), or
:mod:`worker.loop.outcomes` has put the job in ``delayed`` with attempts + 1
(retry script: ZADD + XACK) or dead-lettered it (bury script: XADD dead +
XACK). An entry delivered before (reclaimed from a dead process) runs alone
and is acknowledged at once, so an innocent neighbour of a crasher never
drifts toward the poison limit.

With several partitions (``QUEUE_PARTITIONS`` > 1) the loop turns over them
(:meth:`Worker._consume_partitions`): entries are keyed by (partition, id),
since ids of different partitions may be equal, and each partition's
acknowledgements ride with its own reads.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions

from worker.app import Chore
from worker.errors import JobTimeout
from worker.kinds import Job, KindSpec, Registry
from worker.loop.chores import CONNECTION_ERRORS, run_chore, sleep_or_stop
from worker.loop.node_connection import REDIRECTIONS, describe
from worker.loop.observe import Observer, Tally
from worker.loop.outcomes import Outcomes
from worker.loop.partition_reader import READ_ERRORS, PartitionReader
from worker.loop.rotation import Rotation
from worker.loop.tracing import Tracing
from worker.loop.upkeep import HEARTBEAT_TTL_S as HEARTBEAT_TTL_S
from worker.loop.upkeep import Upkeep
from worker.settings import Settings
from worker.store import wire
from worker.store.keys import GROUP, Keys
from worker.store.partitions import partition_keys
from worker.store.reconnect import backoff_s, with_backoff
from worker.store.scripts import Scripts

log = logging.getLogger("worker")

#: What a read can raise that the loop survives (:meth:`Worker._read_failed`).


class Worker:
    """One consumer in group ``workers``: the read loop and its slots.

    What became of each entry is its partition's :class:`Outcomes`' business
    (:attr:`parts`), the timed chores :attr:`upkeep`'s.
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
        self.inflight: dict[tuple[int, str], asyncio.Task[None]] = {}
        self.started_at: dict[tuple[int, str], float] = {}
        self._slot_freed = asyncio.Event()
        self._reading = asyncio.Lock()
        self._threads = ThreadPoolExecutor(settings.concurrency, thread_name_prefix="job")
        self._rng = random.Random()
        self._tracing = Tracing.detect(self.keys.jobs)
        self.upkeep = Upkeep(self)
        self.rotation = Rotation(self)
        block_ms = min(settings.block_ms, 50) if burst else settings.block_ms
        observers = list(observers)
        observing = [self.tally, *observers]
        # Bound once, for every job: the wait observers (the tally counts outcomes only) and the field limit.
        self._job_started = [observer.job_started for observer in observers]
        self._max_field_bytes = settings.max_field_bytes
        self.parts = []
        for keys in partition_keys(settings):
            scripts = Scripts(redis_client, keys, wait_replicas=settings.wait_replicas)
            outcomes = Outcomes(
                redis_client,
                scripts,
                settings,
                observing,
                promote_soon=functools.partial(self.upkeep.promote_soon, scripts),
                rng=self._rng,
            )
            self.parts.append(PartitionReader(redis_client, outcomes, self.name, block_ms))

    # ------------------------------------------------------------------ loop

    async def run(self) -> None:
        """Consume until stopped (or, in burst mode, until the queue is drained)."""
        await self.ensure_group()
        log.info(
            "Worker %s started: %d slots, kinds %s.",
            self.name,
            self.settings.concurrency,
            ", ".join(sorted(self.registry.kinds)) or "none",
        )
        if 1 < len(self.parts) > self.settings.concurrency:
            log.warning(
                "WORKER_CONCURRENCY=%d is below QUEUE_PARTITIONS=%d: an idle partition waits for new entries "
                "in a read that holds a slot, so partitions take turns at the block time; give each a slot.",
                self.settings.concurrency,
                len(self.parts),
            )
        chores = [asyncio.create_task(run_chore(c, self.stopping)) for c in self.chores()]
        try:
            await self._consume()
        finally:
            self.stopping.set()
            await self._drain()
            for task in chores:
                task.cancel()
            await asyncio.gather(*chores, return_exceptions=True)
            await self._goodbye()
            self._threads.shutdown(wait=False, cancel_futures=True)
            self.upkeep.log_summary()

    def stop(self) -> None:
        """Stop reading; running jobs get ``SHUTDOWN_GRACE_S`` to finish."""
        if not self.stopping.is_set():
            log.info("Worker %s is stopping: no new reads, running jobs may finish.", self.name)
        self.stopping.set()
        self._slot_freed.set()

    def chores(self) -> list[Chore]:
        """The worker's own timed chores (:mod:`worker.loop.upkeep`), then the caller's (scheduler, relay, metrics)."""
        return [*self.upkeep.chores(), *self.extra_chores]

    async def ensure_group(self) -> None:
        """Create group ``workers`` on each partition's ``jobs`` (and the stream) unless it exists."""
        for part in self.parts:
            try:
                await self.redis.xgroup_create(part.keys.jobs, GROUP, id="0", mkstream=True)
            except redis.exceptions.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    async def _consume(self) -> None:
        if len(self.parts) > 1:
            await self.rotation.consume()
            return
        part = self.parts[0]
        failures = 0
        while not self.stopping.is_set():
            free = self.settings.concurrency - len(self.inflight)
            if free <= 0:
                self._slot_freed.clear()
                await self._slot_freed.wait()
                # Let the other jobs that are ready finish too, so the next read fills
                # many slots in one round trip instead of one slot per round trip.
                await asyncio.sleep(0)
                await asyncio.sleep(0)
                continue
            try:
                async with self._reading:
                    if self.stopping.is_set():
                        break
                    entries = await part.read(free)
                    for entry_id, raw in entries:
                        self._start(part, entry_id, raw)
            except READ_ERRORS as exc:
                failures = await self._read_failed(exc, failures)
                continue
            if failures:
                self._reconnected(part)
                failures = 0
            if not entries and self.burst and await self._drained():
                log.info("Burst mode: the queue is drained; exiting.")
                return

    async def _read_failed(self, exc: BaseException, failures: int) -> int:
        """A read failed: back off on a lost connection (logged once), recreate a lost group; the
        failures so far. Another error is raised."""
        if isinstance(exc, redis.exceptions.ResponseError) and not isinstance(exc, REDIRECTIONS):
            if "NOGROUP" not in str(exc):
                raise exc
            log.warning("The consumer group is gone (Redis lost its data?); creating it again.")
            await self.ensure_group()
            return failures
        failures += 1
        if failures == 1:
            log.warning("Lost the connection to Redis (%s); reconnecting with backoff.", describe(exc))
        await sleep_or_stop(backoff_s(failures, rng=self._rng), self.stopping)
        return failures

    def _reconnected(self, part: PartitionReader) -> None:
        log.info("Reconnected to Redis%s.", f" (node {part.node.where})" if part.node.where else "")

    def _start(self, part: PartitionReader, entry_id: str, raw: dict[bytes, bytes], alone: bool = False) -> None:
        slot = (part.index, entry_id)
        if self._tracing is None:
            run = self.run_entry(part, entry_id, raw, alone=alone)
        else:
            run = self._tracing.run_entry(self.run_entry, part, entry_id, raw, alone)
        self.inflight[slot] = asyncio.create_task(run)
        self.started_at[slot] = time.monotonic()

    async def _drained(self) -> bool:
        """Burst mode's exit test: nothing in flight, pending, undelivered or delayed,
        and no ``more_work`` check (a lifespan's, e.g. unpublished outbox rows) says otherwise.

        The checks run before Redis is read: work they see end up in ``jobs`` or
        ``delayed`` before they turn false, and the undelivered test catches an
        entry a chore (relay, promote) added since the last read.
        """
        if self.inflight:
            return False
        for check in self.more_work:
            if await check():
                return False
        for part in self.parts:
            await part.outcomes.flush()
        pipe = self.redis.pipeline(transaction=False)
        for part in self.parts:
            pipe.xpending(part.keys.jobs, GROUP)
            pipe.zcard(part.keys.delayed)
            pipe.xinfo_stream(part.keys.jobs)
            pipe.xinfo_groups(part.keys.jobs)
        replies = await pipe.execute()
        for n in range(0, len(replies), 4):
            pending, delayed, stream, groups = replies[n : n + 4]
            delivered = next((g["last-delivered-id"] for g in groups if g["name"] in (GROUP, GROUP.encode())), None)
            undelivered = stream["length"] > 0 and delivered != stream["last-generated-id"]
            if int(pending["pending"]) or int(delayed) or undelivered:
                return False
        return True

    async def _drain(self) -> None:
        """On stop: let running jobs finish within the grace period, then flush acks."""
        if self.inflight:
            log.info(
                "Waiting up to %.0f s for %d running jobs.",
                self.settings.shutdown_grace_s,
                len(self.inflight),
            )
            _done, left = await asyncio.wait(list(self.inflight.values()), timeout=self.settings.shutdown_grace_s)
            if left:
                log.warning(
                    "%d jobs did not finish within SHUTDOWN_GRACE_S; they stay pending for reclaim.",
                    len(left),
                )
                for task in left:
                    task.cancel()
                await asyncio.wait(left, timeout=1.0)
        for part in self.parts:
            try:
                await with_backoff(part.outcomes.flush, attempts=5, base_s=0.1)
            except CONNECTION_ERRORS:
                log.warning(
                    "Could not acknowledge %d finished jobs; they will be reclaimed and run again.",
                    len(part.outcomes.acks),
                )

    async def _goodbye(self) -> None:
        for part in self.parts:
            await part.node.release()
        await self.upkeep.stop_heartbeat()

    # ---------------------------------------------------------------- slots

    async def run_entry(
        self, part: PartitionReader, entry_id: str, raw: dict[bytes, bytes], *, alone: bool = False
    ) -> None:
        """Run one entry of ``part`` through its handler and record the outcome. Never raises."""
        outcomes = part.outcomes
        try:
            parsed = wire.parse_entry(entry_id, raw, self.registry, self._max_field_bytes)
            if isinstance(parsed, wire.Malformed):
                await outcomes.malformed(parsed)
                return
            spec = self.registry.kinds[parsed.kind]
            if self._job_started:
                waited_s = time.time() - wire.entry_epoch_s(entry_id)
                for job_started in self._job_started:
                    job_started(parsed.kind, waited_s)
            started = time.perf_counter()
            try:
                if spec.is_async and spec.timeout_s is None:
                    await spec.handler(parsed)  # the common case, without _call's frame
                else:
                    await self._call(spec, parsed)
            except (Exception, SystemExit) as exc:
                await outcomes.failed(spec, parsed, exc, time.perf_counter() - started)
                return
            part.succeeded(parsed, time.perf_counter() - started)
            if alone:
                await outcomes.flush()
        except asyncio.CancelledError:
            raise
        except Exception:
            # Only Redis being away can get here; the entry stays pending and is reclaimed.
            log.exception("Could not record the outcome of entry %s; it stays pending.", entry_id)
        finally:
            slot = (part.index, entry_id)
            self.inflight.pop(slot, None)
            self.started_at.pop(slot, None)
            self._slot_freed.set()

    async def _call(self, spec: KindSpec, job: Job) -> None:
        if spec.is_async:
            call = spec.handler(job)
        else:
            loop = asyncio.get_running_loop()
            if self._tracing is None:
                call = loop.run_in_executor(self._threads, spec.handler, job)
            else:  # the attempt's span stays current in the thread
                call = loop.run_in_executor(self._threads, contextvars.copy_context().run, spec.handler, job)
        if spec.timeout_s is None:
            await call
            return
        try:
            await asyncio.wait_for(call, spec.timeout_s)
        except TimeoutError:
            raise JobTimeout(f"{spec.name} ran longer than its timeout of {spec.timeout_s} s") from None

    async def run_alone(
        self, part: PartitionReader, entry_id: str, idle_ms: int, previous: str, deliveries: int
    ) -> None:
        """Claim one idle entry of ``part`` and run it with nothing else in flight in this worker
        (no job running, no read waiting that could return one)."""
        async with self._reading:
            while self.inflight or any(p.waiting is not None and not p.waiting.done() for p in self.parts):
                self._slot_freed.clear()
                await self._slot_freed.wait()
            claimed: list[Any] = await self.redis.xclaim(part.keys.jobs, GROUP, self.name, idle_ms, [entry_id])
            if not claimed or claimed[0] is None or claimed[0][1] is None:
                return
            log.warning(
                "Reclaimed entry %s from %s (delivery %d); running it alone.",
                entry_id,
                previous,
                deliveries + 1,
            )
            self._start(part, entry_id, claimed[0][1], alone=True)
            await asyncio.shield(self.inflight[(part.index, entry_id)])
