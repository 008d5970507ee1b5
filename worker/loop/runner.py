"""The worker: its partitions, slots, read loop and chores put together; running one entry; drain on stop.

The read loop (:mod:`worker.loop.rotation`, one partition or several) starts
entries in the worker's :class:`~worker.loop.slots.Slots`; everything else is
a timed chore beside it (:mod:`worker.loop.upkeep`).

A slot runs :meth:`Worker.run_entry`, which never raises: it returns after
the handler succeeded (the entry is acknowledged in the next batch), or
:mod:`worker.loop.outcomes` has put the job in ``delayed`` with attempts + 1
(retry script: ZADD + XACK) or dead-lettered it (bury script: XADD dead +
XACK). An entry delivered before (reclaimed from a dead process) runs alone
and is acknowledged at once, so an innocent neighbour of a crasher never
drifts toward the poison limit.
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

import redis.asyncio as aioredis
import redis.exceptions

from worker.app import Chore
from worker.errors import JobTimeout
from worker.kinds import Job, KindSpec, Registry
from worker.loop.chores import run_chore
from worker.loop.declare import declare_chore
from worker.loop.episode import Episode
from worker.loop.gate import Gate
from worker.loop.observe import Observer, Tally
from worker.loop.outcomes import Outcomes
from worker.loop.partition_reader import PartitionReader, give_back
from worker.loop.read_ahead import ReadAhead
from worker.loop.rotation import Rotation
from worker.loop.slots import Raw, Slots
from worker.loop.tracing import record_failure, traced
from worker.loop.upkeep import Upkeep
from worker.settings import Settings
from worker.store import wire
from worker.store.keys import GROUP, Keys
from worker.store.partitions import partition_keys
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
        self._traced, run = traced(self.run_entry, self.keys.jobs)  # with an OpenTelemetry SDK, each in its span
        self.episode = Episode()
        """Redis refusing writes: decided outcomes kept until they land (:mod:`worker.loop.episode`)."""
        self.slots = Slots(settings.concurrency, run, self.episode.troubles)
        self._threads = ThreadPoolExecutor(settings.concurrency, thread_name_prefix="job")
        self._rng = random.Random()
        block_ms = min(settings.block_ms, 50) if burst else settings.block_ms
        observing = [self.tally, *observers]
        # Bound once, for every job: the wait observers (the tally counts outcomes only) and the field limit.
        self._job_started = [observer.job_started for observer in observing[1:]]
        self._max_field_bytes, self._max_job_bytes = settings.max_field_bytes, settings.max_job_bytes
        self.parts: list[PartitionReader] = []
        for keys in partition_keys(settings):
            scripts = Scripts(redis_client, keys, wait_replicas=settings.wait_replicas)
            outcomes = Outcomes(
                redis_client,
                scripts,
                settings,
                observing,
                promote_soon=functools.partial(self._promote_soon, scripts),
                episode=self.episode,
                rng=self._rng,
            )
            self.parts.append(PartitionReader(redis_client, outcomes, self.name, block_ms))
        self.gate = Gate(redis_client, self.keys, self.parts[0].keys, registry)
        self.upkeep = Upkeep(
            redis_client, settings, self.slots, self.parts, self.stopping, self.tally, episode=self.episode
        )
        self.rotation = Rotation(
            self.slots,
            self.parts,
            self.stopping,
            recreate_group=self.ensure_group,
            episode=self.episode,
            drained=self._drained if burst else None,
            rng=self._rng,
            read_ahead=ReadAhead(settings.prefetch, settings.reclaim_idle_ms),
        )

    def _promote_soon(self, scripts: Scripts, delay_s: float) -> None:
        self.upkeep.promote_soon(scripts, delay_s)

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
        await self.gate.refresh()
        chores = [asyncio.create_task(run_chore(c, self.stopping, self.episode)) for c in self.chores()]
        try:
            await self.rotation.consume()
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
        self.slots.freed.set()

    def chores(self) -> list[Chore]:
        """The worker's own timed chores (:mod:`worker.loop.upkeep`), then the caller's (scheduler, relay, metrics)."""
        declare = declare_chore(self.redis, self.keys, self.name, self.registry, self.tally)
        return [*self.upkeep.chores(), self.gate.chore(), declare, *self.extra_chores]

    async def ensure_group(self) -> None:
        """Create group ``workers`` on each partition's ``jobs`` (and the stream) unless it exists."""
        for part in self.parts:
            try:
                await self.redis.xgroup_create(part.keys.jobs, GROUP, id="0", mkstream=True)
            except redis.exceptions.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    async def _drained(self) -> bool:
        """Burst mode's exit test: nothing in flight, pending, undelivered, delayed or throttled (a paused
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
        replies = await pipe.execute()
        for n in range(0, len(replies), 5):
            pending, delayed, stream, groups, throttled = replies[n : n + 5]
            delivered = next((g["last-delivered-id"] for g in groups if g["name"] in (GROUP, GROUP.encode())), None)
            undelivered = stream["length"] > 0 and delivered != stream["last-generated-id"]
            if int(pending["pending"]) or int(delayed) or int(throttled) or undelivered:
                return False
        return True

    async def _drain(self) -> None:
        """On stop: what was read ahead runs as slots free (else it is given back), running jobs and outcomes
        kept through an episode get ``SHUTDOWN_GRACE_S``, then the acknowledgements are sent, until the same
        deadline. What is left stays pending for reclaim (as a dead process's entries do), said in one line."""
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
        for task in left:
            task.cancel()
        if left:
            await asyncio.wait(left, timeout=1.0)
        unsent = 0
        for part in self.parts:
            try:
                await asyncio.wait_for(part.outcomes.flush_kept("acks"), max(0.5, deadline - time.monotonic()))
            except Exception as exc:
                if not (lost_connection(exc) or isinstance(exc, redis.exceptions.RedisError)):
                    raise
                unsent += len(part.outcomes.acks)
        if left or unsent:
            log.warning(
                "%d jobs did not finish within SHUTDOWN_GRACE_S=%g s, and %d outcomes and %d acknowledgements "
                "were not recorded%s: their entries are left pending, for reclaim to run again.",
                len(left) - kept,
                grace_s,
                kept,
                unsent,
                f" (Redis refuses writes: {reason})" if reason else "",
            )

    async def _goodbye(self) -> None:
        for part in self.parts:
            await part.node.release()
        await self.upkeep.stop_heartbeat()

    # ---------------------------------------------------------------- slots

    async def run_entry(self, part: PartitionReader, entry_id: str, raw: Raw, alone: bool = False) -> None:
        """Run one entry of ``part`` through its handler, record the outcome and free its slot. Never raises."""
        outcomes = part.outcomes
        try:
            parsed = wire.parse_entry(entry_id, raw, self.registry, self._max_field_bytes, self._max_job_bytes)
            if isinstance(parsed, wire.Malformed):
                await outcomes.malformed(parsed)
                return
            spec = self.registry.kinds[parsed.kind]
            if parsed.kind in self.gate.held and not await self.gate.admit(part, parsed):
                return
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
                record_failure(exc)  # on the attempt's span, when the worker traces
                await outcomes.failed(spec, parsed, exc, time.perf_counter() - started)
                return
            part.succeeded(parsed, time.perf_counter() - started)
            if alone:
                await outcomes.flush_kept(entry_id)
        except asyncio.CancelledError:
            raise
        except Exception:
            # Only an error Redis will not get over (a refusal or a lost connection waits in the
            # episode) can get here; the entry stays pending and is reclaimed.
            log.exception("Could not record the outcome of entry %s; it stays pending.", entry_id)
        finally:
            self.slots.free_slot(part.index, entry_id)

    async def _call(self, spec: KindSpec, job: Job) -> None:
        if spec.is_async:
            call = spec.handler(job)
        else:
            run = contextvars.copy_context().run  # the task's context (the attempt's span) goes with it, as to_thread
            call = asyncio.get_running_loop().run_in_executor(self._threads, run, spec.handler, job)
        if spec.timeout_s is None:
            await call
            return
        try:
            await asyncio.wait_for(call, spec.timeout_s)
        except TimeoutError:
            raise JobTimeout(f"{spec.name} ran longer than its timeout of {spec.timeout_s} s") from None
