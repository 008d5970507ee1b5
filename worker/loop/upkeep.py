"""The worker's own timed chores, each run beside the loop by :func:`worker.loop.chores.run_chore`.

| chore | every | does |
| --- | --- | --- |
| promote | until the next due job, at most 1 s | moves due ``delayed``, ``throttled`` jobs onto ``jobs`` (promote) |
| reclaim | ``RECLAIM_INTERVAL_S`` | dead-letters poison; claims other idle pending entries and runs each alone |
| refresh-claims | a third of ``RECLAIM_IDLE_MS`` | keeps this worker's long-running entries from looking idle |
| heartbeat | 5 s | ``workers:<worker>``, 15 s expiry (health checks, clean-up); ``kinds:<worker>`` beside it |
| trim | 1 s | keeps ``jobs`` bounded without dropping undelivered or pending entries |
| forget-consumers | 60 s | removes consumers of dead workers once they own nothing |
| summary | 60 s | one log line: jobs processed per kind and outcome |

Each chore that acts on ``jobs`` or ``delayed`` does so in every partition
(:attr:`worker.loop.runner.Worker.parts`); the heartbeat is the worker's, queue-wide.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from worker.app import Chore
from worker.kinds import declaration
from worker.loop.chores import CONNECTION_ERRORS, sleep_or_stop
from worker.store.consumers import forget_dead_consumers
from worker.store.failures import now_iso
from worker.store.keys import GROUP
from worker.store.scripts import Scripts

if TYPE_CHECKING:
    from worker.loop.runner import Worker

log = logging.getLogger("worker")

HEARTBEAT_INTERVAL_S = 5.0
HEARTBEAT_TTL_S = 15
SUMMARY_INTERVAL_S = 60.0


class Upkeep:
    """The chores of one worker. They read the loop's state (``inflight``,
    ``started_at``, ``stopping``) and hand reclaimed entries back to it."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.redis = worker.redis
        self.settings = worker.settings
        self.keys = worker.keys
        self.declared = declaration(worker.registry)
        self._side_tasks: set[asyncio.Task[None]] = set()

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
        ]

    async def promote_due(self) -> float:
        """Move due delayed jobs onto ``jobs`` in every partition; sleep until the next one is due (at most 1 s)."""
        wake_s = 1.0
        for part in self.worker.parts:
            wake_s = min(wake_s, await self.promote(part.scripts))
        return wake_s

    async def promote(self, scripts: Scripts) -> float:
        """Move one partition's due delayed (and throttle-deferred) jobs onto its ``jobs``; how long until
        its next one is due."""
        wake_s = 1.0
        for throttled, source in ((False, scripts.keys.delayed), (True, scripts.keys.throttled)):
            while await scripts.promote(time.time(), 100, throttled=throttled) == 100:
                pass
            head = await self.redis.zrange(source, 0, 0, withscores=True)
            if head:
                wake_s = min(wake_s, max(0.01, float(head[0][1]) - time.time()))
        return wake_s

    def promote_soon(self, scripts: Scripts, delay_s: float) -> None:
        """Promote ``scripts``' partition once more after ``delay_s``: a retry due sooner than the chore's
        next wake."""

        async def later() -> None:
            if not await sleep_or_stop(delay_s, self.worker.stopping):
                with contextlib.suppress(*CONNECTION_ERRORS):
                    await self.promote(scripts)

        task = asyncio.create_task(later())
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    async def reclaim(self) -> None:
        """Dead-letter poison entries; claim other idle pending entries and run each alone (every partition)."""
        idle_ms = self.settings.reclaim_idle_ms
        for part in self.worker.parts:
            pending: list[dict[str, Any]] = await self.redis.xpending_range(
                part.keys.jobs, GROUP, min="-", max="+", count=100, idle=idle_ms
            )
            for item in pending:
                if self.worker.stopping.is_set():
                    return
                entry_id = item["message_id"].decode()
                deliveries = int(item["times_delivered"])
                consumer = item["consumer"].decode()
                if deliveries >= self.settings.max_deliveries:
                    await part.outcomes.poison(entry_id, deliveries, consumer, idle_ms)
                    continue
                await self.worker.run_alone(part, entry_id, idle_ms, consumer, deliveries)

    async def refresh_claims(self) -> None:
        """Reset the idle time of entries running longer than a third of RECLAIM_IDLE_MS."""
        horizon = time.monotonic() - self.settings.reclaim_idle_ms / 3000
        old: dict[int, list[str]] = {}
        for (partition, entry_id), started in list(self.worker.started_at.items()):
            if started < horizon:
                old.setdefault(partition, []).append(entry_id)
        for part in self.worker.parts:
            if part.index in old:
                await part.scripts.refresh_claims(self.worker.name, old[part.index])

    async def heartbeat(self) -> None:
        """Say this worker is alive (for health checks and consumer clean-up)."""
        info = json.dumps({"at": now_iso(), "inflight": len(self.worker.inflight), "slots": self.settings.concurrency})
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(self.keys.heartbeat(self.worker.name), info, ex=HEARTBEAT_TTL_S)
        pipe.set(self.keys.declared(self.worker.name), self.declared, ex=HEARTBEAT_TTL_S)
        await pipe.execute()

    async def stop_heartbeat(self) -> None:
        """Remove this worker's heartbeat on the way out (best effort: it expires anyway)."""
        with contextlib.suppress(*CONNECTION_ERRORS):
            await self.redis.delete(self.keys.heartbeat(self.worker.name), self.keys.declared(self.worker.name))

    async def trim(self) -> None:
        """Keep each ``jobs`` bounded: drop acknowledged entries, never undelivered or pending ones."""
        for part in self.worker.parts:
            await part.scripts.trim()

    async def forget_consumers(self) -> None:
        """Remove consumers of dead workers once they own nothing (from each partition's group)."""
        for part in self.worker.parts:
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
        counts, elapsed = self.worker.tally.take()
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
