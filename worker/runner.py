"""The consumer loop: read, hand each entry to a slot, acknowledge, drain on stop.

The loop reads like a checklist: stopping? how many free slots? read at most
that many entries (the pending acknowledgements ride in the same round trip),
hand each entry to a slot. Everything else is a timed chore beside it
(:mod:`worker.upkeep`).

A slot runs :meth:`Worker.run_entry`, which never raises: it returns after
the handler succeeded (the entry is acknowledged in the next batch), or
:mod:`worker.outcomes` has put the job in ``delayed`` with attempts + 1
(retry script: ZADD + XACK) or dead-lettered it (bury script: XADD dead +
XACK). An entry delivered before (reclaimed from a dead process) runs alone
and is acknowledged at once, so an innocent neighbour of a crasher never
drifts toward the poison limit.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions

from worker import wire
from worker.chores import CONNECTION_ERRORS, Chore, run_chore, sleep_or_stop
from worker.errors import JobTimeout
from worker.keys import GROUP, Keys
from worker.kinds import Job, KindSpec, Registry
from worker.observe import Observer, Tally, entry_epoch_s
from worker.outcomes import Outcomes
from worker.reconnect import backoff_s, with_backoff
from worker.resp import pairs, resp_command
from worker.scripts import Scripts
from worker.settings import Settings
from worker.upkeep import HEARTBEAT_TTL_S as HEARTBEAT_TTL_S
from worker.upkeep import Upkeep

log = logging.getLogger("worker")


class Worker:
    """One consumer in group ``workers``: the read loop and its slots.

    What became of each entry is :attr:`outcomes`' business, the timed chores
    :attr:`upkeep`'s.
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
        self.scripts = Scripts(redis_client, self.keys)
        self.tally = Tally()
        self.extra_chores = list(chores)
        self.more_work = list(more_work)
        self.stopping = asyncio.Event()
        self.inflight: dict[str, asyncio.Task[None]] = {}
        self.started_at: dict[str, float] = {}
        self._slot_freed = asyncio.Event()
        self._reading = asyncio.Lock()
        self._threads = ThreadPoolExecutor(settings.concurrency, thread_name_prefix="job")
        self._rng = random.Random()
        self._read_conn: Any = None
        self._read_commands: dict[int, bytes] = {}
        self._xack_head = ("XACK", self.keys.jobs, GROUP)
        observers = list(observers)
        self.upkeep = Upkeep(self)
        # Bound once, for every job: the wait observers (the tally counts outcomes only) and the field limit.
        self._job_started = [observer.job_started for observer in observers]
        self._max_field_bytes = settings.max_field_bytes
        self.outcomes = Outcomes(
            redis_client,
            self.scripts,
            settings,
            [self.tally, *observers],
            promote_soon=self.upkeep.promote_soon,
            rng=self._rng,
        )
        self._succeeded = self.outcomes.succeeded  # bound once: called for every job

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
        """The worker's own timed chores (:mod:`worker.upkeep`), then the caller's (scheduler, relay, metrics)."""
        return [*self.upkeep.chores(), *self.extra_chores]

    async def ensure_group(self) -> None:
        """Create group ``workers`` on ``jobs`` (and the stream) unless it exists."""
        try:
            await self.redis.xgroup_create(self.keys.jobs, GROUP, id="0", mkstream=True)
        except redis.exceptions.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def _consume(self) -> None:
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
                    entries = await self._read(free)
                    for entry_id, raw in entries:
                        self._start(entry_id, raw)
            except CONNECTION_ERRORS as exc:
                failures += 1
                if failures == 1:
                    log.warning("Lost the connection to Redis (%s); reconnecting with backoff.", exc)
                await sleep_or_stop(backoff_s(failures, rng=self._rng), self.stopping)
                continue
            except redis.exceptions.ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                log.warning("The consumer group is gone (Redis lost its data?); creating it again.")
                await self.ensure_group()
                continue
            if failures:
                log.info("Reconnected to Redis.")
                failures = 0
            if not entries and self.burst and await self._drained():
                log.info("Burst mode: the queue is drained; exiting.")
                return

    async def _read(self, count: int) -> list[tuple[str, dict[bytes, bytes]]]:
        """Acknowledge finished entries and read up to ``count`` new ones, in one round trip.

        The read loop owns one connection and writes XACK and XREADGROUP to it
        together (a pipeline without redis-py's per-call pipeline object, which
        costs more than the round trip at this rate). Replay outcomes, rare,
        are flushed separately first.
        """
        outcomes = self.outcomes
        if outcomes.replay_outcomes:
            await outcomes.flush()
        acks = outcomes.take_acks()
        conn = self._read_conn
        if conn is None:
            conn = self._read_conn = await self.redis.connection_pool.get_connection()
        try:
            read = self._read_command(count)
            if acks:
                await conn.send_packed_command(resp_command(self._xack_head, *acks) + read, check_health=False)
                await conn.read_response()
            else:
                await conn.send_packed_command(read, check_health=False)
            reply = await conn.read_response()
        except BaseException:
            outcomes.give_back_acks(acks)
            await conn.disconnect()
            raise
        if not reply:
            return []
        entries = next(iter(reply.values())) if isinstance(reply, dict) else reply[0][1]
        return [(eid.decode(), pairs(flat)) for eid, flat in entries]

    def _read_command(self, count: int) -> bytes:
        """The packed XREADGROUP for ``count`` entries (cached: it is sent thousands of times a second)."""
        packed = self._read_commands.get(count)
        if packed is None:
            block_ms = min(self.settings.block_ms, 50) if self.burst else self.settings.block_ms
            packed = resp_command(
                ("XREADGROUP", "GROUP", GROUP, self.name, "COUNT", str(count), "BLOCK", str(block_ms)),
                "STREAMS",
                self.keys.jobs,
                ">",
            )
            self._read_commands[count] = packed
        return packed

    def _start(self, entry_id: str, raw: dict[bytes, bytes], alone: bool = False) -> None:
        self.inflight[entry_id] = asyncio.create_task(self.run_entry(entry_id, raw, alone=alone))
        self.started_at[entry_id] = time.monotonic()

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
        await self.outcomes.flush()
        pipe = self.redis.pipeline(transaction=False)
        pipe.xpending(self.keys.jobs, GROUP)
        pipe.zcard(self.keys.delayed)
        pipe.xinfo_stream(self.keys.jobs)
        pipe.xinfo_groups(self.keys.jobs)
        pending, delayed, stream, groups = await pipe.execute()
        delivered = next((g["last-delivered-id"] for g in groups if g["name"] in (GROUP, GROUP.encode())), None)
        undelivered = stream["length"] > 0 and delivered != stream["last-generated-id"]
        return int(pending["pending"]) == 0 and int(delayed) == 0 and not undelivered

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
        try:
            await with_backoff(self.outcomes.flush, attempts=5, base_s=0.1)
        except CONNECTION_ERRORS:
            log.warning(
                "Could not acknowledge %d finished jobs; they will be reclaimed and run again.",
                len(self.outcomes.acks),
            )

    async def _goodbye(self) -> None:
        if self._read_conn is not None:
            await self.redis.connection_pool.release(self._read_conn)
            self._read_conn = None
        await self.upkeep.stop_heartbeat()

    # ---------------------------------------------------------------- slots

    async def run_entry(self, entry_id: str, raw: dict[bytes, bytes], *, alone: bool = False) -> None:
        """Run one entry through its handler and record the outcome. Never raises."""
        try:
            parsed = wire.parse_entry(entry_id, raw, self.registry, self._max_field_bytes)
            if isinstance(parsed, wire.Malformed):
                await self.outcomes.malformed(parsed)
                return
            spec = self.registry.kinds[parsed.kind]
            if self._job_started:
                waited_s = time.time() - entry_epoch_s(entry_id)
                for job_started in self._job_started:
                    job_started(parsed.kind, waited_s)
            started = time.perf_counter()
            try:
                if spec.is_async and spec.timeout_s is None:
                    await spec.handler(parsed)  # the common case, without _call's frame
                else:
                    await self._call(spec, parsed)
            except (Exception, SystemExit) as exc:
                await self.outcomes.failed(spec, parsed, exc, time.perf_counter() - started)
                return
            self._succeeded(parsed, time.perf_counter() - started)
            if alone:
                await self.outcomes.flush()
        except asyncio.CancelledError:
            raise
        except Exception:
            # Only Redis being away can get here; the entry stays pending and is reclaimed.
            log.exception("Could not record the outcome of entry %s; it stays pending.", entry_id)
        finally:
            self.inflight.pop(entry_id, None)
            self.started_at.pop(entry_id, None)
            self._slot_freed.set()

    async def _call(self, spec: KindSpec, job: Job) -> None:
        if spec.is_async:
            call = spec.handler(job)
        else:
            call = asyncio.get_running_loop().run_in_executor(self._threads, spec.handler, job)
        if spec.timeout_s is None:
            await call
            return
        try:
            await asyncio.wait_for(call, spec.timeout_s)
        except TimeoutError:
            raise JobTimeout(f"{spec.name} ran longer than its timeout of {spec.timeout_s} s") from None

    async def run_alone(self, entry_id: str, idle_ms: int, previous: str, deliveries: int) -> None:
        """Claim one idle entry and run it with nothing else in flight in this worker."""
        async with self._reading:
            while self.inflight:
                self._slot_freed.clear()
                await self._slot_freed.wait()
            claimed: list[Any] = await self.redis.xclaim(self.keys.jobs, GROUP, self.name, idle_ms, [entry_id])
            if not claimed or claimed[0] is None or claimed[0][1] is None:
                return
            log.warning(
                "Reclaimed entry %s from %s (delivery %d); running it alone.",
                entry_id,
                previous,
                deliveries + 1,
            )
            self._start(entry_id, claimed[0][1], alone=True)
            await asyncio.shield(self.inflight[entry_id])
