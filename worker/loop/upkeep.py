"""The worker's own timed chores, each run beside the loop by :func:`worker.loop.chores.run_chore`.

| chore | every | does |
| --- | --- | --- |
| promote | until the next due job, at most 1 s | moves due ``delayed``, ``throttled`` jobs onto ``jobs`` (promote) |
| reclaim | ``RECLAIM_INTERVAL_S`` (at once after a full page) | dead-letters poison; runs other idle entries alone |
| refresh-claims | a third of ``RECLAIM_IDLE_MS`` | keeps this worker's long-running and read-ahead entries busy |
| heartbeat | 5 s | this worker in ``workers``, expiry 15 s ahead; prunes the expired (health, consumer clean-up) |
| trim | 1 s | keeps ``jobs`` bounded without dropping undelivered or pending entries |
| forget-consumers | 60 s | removes consumers of dead workers once they own nothing |
| summary | 60 s | one log line: jobs processed per kind and outcome |
| watchdog | 0.25 s | the loop's beat, which the watchdog thread watches (:mod:`worker.loop.watchdog`) |

Each chore that acts on ``jobs`` or ``delayed`` does so in every partition;
the heartbeat is the worker's, queue-wide. The chores see the loop only through
its :class:`~worker.loop.slots.Slots` (what runs, since when; running an entry
alone), the partitions and the stop event.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions

from worker.app import Chore
from worker.loop.chores import sleep_or_stop
from worker.loop.episode import Episode
from worker.loop.observe import Tally
from worker.loop.partition_reader import PartitionReader, give_back
from worker.loop.slots import Raw, Slots, Suspect
from worker.loop.watchdog import BEAT_S, Watchdog
from worker.settings import Settings
from worker.store.consumers import forget_dead_consumers
from worker.store.heartbeats import HEARTBEAT_INTERVAL_S, beat
from worker.store.keys import GROUP, Keys
from worker.store.reconnect import unless_lost
from worker.store.scripts import Scripts
from worker.store.server_clock import CLOCK

log = logging.getLogger("worker")

SUMMARY_INTERVAL_S = 60.0
#: After an episode of refused writes, how long reclaim waits for live workers to refresh their claims.
SETTLE_S = HEARTBEAT_INTERVAL_S
#: Pending entries the reclaim chore looks at in one partition at a time; a full page brings it back at once.
RECLAIM_PAGE = 100


class Upkeep:
    """The chores of one worker over its partitions ``parts``: they read what runs in ``slots`` and run
    reclaimed entries alone there; ``tally`` feeds the summary line."""

    def __init__(
        self,
        redis_client: aioredis.Redis,
        settings: Settings,
        slots: Slots,
        parts: Sequence[PartitionReader],
        stopping: asyncio.Event,
        tally: Tally,
        *,
        episode: Episode | None = None,
        overdue: Callable[[], int] = lambda: 0,
    ) -> None:
        self.redis = redis_client
        self.settings = settings
        self.name = settings.worker_name
        self.keys = Keys(settings.prefix)
        self.slots = slots
        self.parts = parts
        self.stopping = stopping
        self.tally = tally
        self.episode = episode or Episode()
        self.overdue = overdue
        """How many running handlers were told to stop and have not (:meth:`Executor.overdue`)."""
        self._side_tasks: set[asyncio.Task[None]] = set()
        parts_keys = [part.keys for part in parts]
        self.watchdog = Watchdog(redis_client, self.name, settings.reclaim_idle_ms, slots, parts_keys, stopping)

    def chores(self) -> list[Chore]:
        """The chores in the module docstring's table."""
        refresh_s = max(0.05, self.settings.reclaim_idle_ms / 3000)
        return [
            Chore("promote", 1.0, self.promote_due),
            Chore("reclaim", self.settings.reclaim_interval_s, self.reclaim),
            Chore("refresh-claims", refresh_s, self.refresh_claims),
            Chore("heartbeat", HEARTBEAT_INTERVAL_S, self.heartbeat),
            Chore("trim", 1.0, self.trim),
            Chore("forget-consumers", 60.0, self.forget_consumers),
            Chore("summary", SUMMARY_INTERVAL_S, self.summary),
            Chore("watchdog", BEAT_S, self.watchdog.beat, jitter=0.0),
        ]

    async def promote_due(self) -> float:
        """Move due delayed jobs onto ``jobs`` in every partition; sleep until the next one is due (at most 1 s).
        Due by Redis's own ``TIME`` (read in the script: an estimate of the offset could run a job a
        millisecond early); the offset, measured first, only times the next wake."""
        await CLOCK.measure(self.redis)
        wake_s = 1.0
        for part in self.parts:
            wake_s = min(wake_s, await self.promote(part.scripts))
        return wake_s

    async def promote(self, scripts: Scripts) -> float:
        """Move one partition's due delayed (and throttle-deferred) jobs onto its ``jobs``; how long until
        its next one is due."""
        wake_s = 1.0
        for throttled, source in ((False, scripts.keys.delayed), (True, scripts.keys.throttled)):
            while await scripts.promote(None, 100, throttled=throttled) == 100:  # due by Redis's TIME
                pass
            head = await self.redis.zrange(source, 0, 0, withscores=True)
            if head:
                wake_s = min(wake_s, max(0.01, float(head[0][1]) - CLOCK.now()))
        return wake_s

    def promote_soon(self, scripts: Scripts, delay_s: float) -> None:
        """Promote ``scripts``' partition once more after ``delay_s``: a retry due sooner than the chore's
        next wake."""

        async def later() -> None:
            if not await sleep_or_stop(delay_s, self.stopping):
                # Refused or away: the promote chore moves it, and says so (this task is never awaited).
                with unless_lost(redis.exceptions.RedisError):
                    await self.promote(scripts)

        task = asyncio.create_task(later())
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    async def reclaim(self) -> float | None:
        """Dead-letter poison entries; claim other idle pending entries and run them alone, back to back
        (every partition). Comes back at once while a look found a full page."""
        if not self._may_reclaim():
            return None
        idle_ms = self.settings.reclaim_idle_ms
        full = False
        for part in self.parts:
            pending: list[dict[str, Any]] = await self.redis.xpending_range(
                part.keys.jobs, GROUP, min="-", max="+", count=RECLAIM_PAGE, idle=idle_ms
            )
            full = full or len(pending) == RECLAIM_PAGE
            suspects: list[Suspect] = []
            for item in pending:
                entry_id = item["message_id"].decode()
                deliveries = int(item["times_delivered"])
                consumer = item["consumer"].decode()
                if (part.index, entry_id) in self.slots.inflight:
                    continue  # this worker still holds it (its outcome may wait to be recorded)
                if deliveries >= self.settings.max_deliveries:
                    await part.outcomes.poison(entry_id, deliveries, consumer, idle_ms)
                else:
                    suspects.append((part, entry_id, self._claim(part, entry_id, idle_ms, consumer, deliveries)))
            await self.slots.run_alone(suspect for suspect in suspects if not self.stopping.is_set())
        return 0.0 if full and not self.stopping.is_set() else None

    def _may_reclaim(self) -> bool:
        """Not while Redis refuses this worker's writes, nor within ``SETTLE_S`` after: no live worker can
        refresh its claims meanwhile, so an idle entry is no sign of a dead process."""
        return not self.episode.active and time.monotonic() - self.episode.ended_at >= SETTLE_S

    def _claim(
        self, part: PartitionReader, entry_id: str, idle_ms: int, previous: str, deliveries: int
    ) -> Callable[[], Awaitable[Raw | None]]:
        """The claim of one idle entry of ``part`` from ``previous``, for :meth:`Slots.run_alone`."""

        async def claim() -> Raw | None:
            if self.stopping.is_set():  # a stopping worker starts nothing new: the entry stays for another
                return None
            claimed: list[Any] = await self.redis.xclaim(part.keys.jobs, GROUP, self.name, idle_ms, [entry_id])
            if not claimed or claimed[0] is None or claimed[0][1] is None:
                return None
            if self.stopping.is_set():  # stopped during the claim: given back before the drain could see it
                await part.give_back([entry_id])
                return None
            log.warning(
                "Reclaimed entry %s from %s (delivery %d); running it alone.", entry_id, previous, deliveries + 1
            )
            raw: Raw = claimed[0][1]
            return raw

        return claim

    async def refresh_claims(self) -> None:
        """Reset the idle time of entries ours (running, or read ahead) for longer than a third of
        RECLAIM_IDLE_MS. While every slot is held by a handler told to stop that runs on (a hung thread),
        what was read ahead is given back instead: another worker takes it at its next reclaim."""
        if self.slots.ahead and self.overdue() >= self.slots.capacity:
            why = "cannot start: every slot is held by a handler that was told to stop and runs on"
            await give_back(self.parts, self.slots.take_ahead(), why)
        old = self.slots.claimed_before(time.monotonic() - self.settings.reclaim_idle_ms / 3000)
        for part in self.parts:
            if part.index in old:
                await part.scripts.refresh_claims(self.name, old[part.index])

    async def heartbeat(self) -> None:
        """Say this worker is alive (for health checks and consumer clean-up); prune the expired. Measure the
        offset from Redis's clock (:mod:`worker.store.server_clock`)."""
        await CLOCK.measure(self.redis)
        pipe = self.redis.pipeline(transaction=False)
        beat(pipe, self.keys, self.name)
        await pipe.execute()

    async def stop_heartbeat(self) -> None:
        """Remove this worker's heartbeat on the way out (best effort: it expires anyway)."""
        with unless_lost():
            await self.redis.zrem(self.keys.workers, self.name)

    async def trim(self) -> None:
        """Keep each ``jobs`` bounded: drop acknowledged entries, never undelivered or pending ones."""
        for part in self.parts:
            await part.scripts.trim()

    async def forget_consumers(self) -> None:
        """Remove consumers of dead workers once they own nothing (from each partition's group)."""
        for part in self.parts:
            removed = await forget_dead_consumers(
                self.redis,
                part.scripts,
                stream=part.keys.jobs,
                group=GROUP,
                min_idle_ms=max(self.settings.reclaim_idle_ms, 60_000),
            )
            if removed:
                log.info("Removed dead consumers from the group on %s: %s.", part.keys.jobs, ", ".join(removed))

    async def summary(self) -> None:
        self.log_summary()

    def log_summary(self) -> None:
        """One line: how many jobs this worker processed since the last one, per kind and outcome."""
        counts, elapsed = self.tally.take()
        if not counts:
            return
        total = sum(counts.values())
        parts = ", ".join(f"{kind} {outcome} {n}" for (kind, outcome), n in sorted(counts.items()))
        log.info(
            "Processed %d jobs in %.0f s (%.0f/s): %s.",
            total,
            elapsed,
            total / max(elapsed, 1e-9),
            parts,
        )
