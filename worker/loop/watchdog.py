"""A watchdog for the event loop: a thread that sees the loop stall, says so, and keeps running jobs' claims.

An ``async def`` handler that blocks (``time.sleep``, CPU work, a synchronous
client) stops the whole loop: no read, no chore, and no claim refresh, so
after ``RECLAIM_IDLE_MS`` another worker's reclaim takes the running job and
it runs twice, without a word in either log. The loop beats every
``BEAT_S`` (a chore); the :class:`Watchdog` thread looks every ``BEAT_S``:

- past a quarter of ``RECLAIM_IDLE_MS`` without a beat, one WARNING per
  stall naming the kind and job of each entry running (read from Redis on
  the watchdog's own connection), and one INFO when the loop runs again;
- while the loop is blocked, it refreshes the running entries' claims
  itself (``refresh_claims.lua``, every third of ``RECLAIM_IDLE_MS``, on its
  own connection: a copy of the worker's connection settings), so a blocked
  loop's job is not taken away; for at most ``HOLD_S`` (300 s) of one stall,
  so that a deadlocked process does not hold its jobs for ever: then it
  says so and lets reclaim take them.

On a cluster the watchdog warns but does not refresh (one connection of its
own per node is not worth it here): keep handlers from blocking there.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis

from worker.loop.slots import Slots
from worker.store.connection import is_cluster
from worker.store.keys import Keys
from worker.store.reconnect import lost_connection
from worker.store.scripts import Scripts
from worker.store.wire import text

log = logging.getLogger("worker")

#: How often the loop beats and the watchdog looks.
BEAT_S = 0.25
#: The longest one stall has its jobs' claims kept fresh by the watchdog.
HOLD_S = 300.0


class Watchdog:
    """The thread (see the module docstring) for the worker named ``name`` over ``parts``' keys."""

    def __init__(
        self, client: Any, name: str, reclaim_idle_ms: int, slots: Slots, parts: Sequence[Keys], stopping: Any
    ) -> None:
        self.client = client
        self.name = name
        self.warn_after_s = reclaim_idle_ms / 4000
        self.refresh_every_s = reclaim_idle_ms / 3000
        self.slots = slots
        self.parts = list(parts)
        self.stopping = stopping
        self.beat_at = time.monotonic()
        self.stalls = 0
        """Stalls seen so far (each warned once)."""
        self._thread: threading.Thread | None = None

    async def beat(self) -> None:
        """The loop is running (a chore every ``BEAT_S``); the first beat starts the thread."""
        self.beat_at = time.monotonic()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="loop-watchdog", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        asyncio.run(self._watch())

    async def _watch(self) -> None:
        client = None
        if not is_cluster(self.client):
            pool = self.client.connection_pool
            clone = aioredis.ConnectionPool(connection_class=pool.connection_class, **pool.connection_kwargs)
            client = aioredis.Redis(connection_pool=clone)
        try:
            while not self.stopping.is_set():
                await asyncio.sleep(BEAT_S)
                stalled_s = time.monotonic() - self.beat_at
                if stalled_s > self.warn_after_s:
                    await self._stall(client, stalled_s)
        finally:
            if client is not None:
                await client.aclose()

    async def _stall(self, client: aioredis.Redis | None, stalled_s: float) -> None:
        """One stall, from its warning to the loop's next beat."""
        self.stalls += 1
        beat_at = self.beat_at
        running = self._running()
        log.warning(
            "The event loop is blocked (%.1f s without a turn): running %s. A handler that blocks (time.sleep, "
            "CPU work, a synchronous client in an async def) holds every job of this worker; their claims are "
            "kept fresh for up to %g s.",
            stalled_s,
            await self._describe(client, running) or "nothing",
            HOLD_S,
        )
        refreshed_at = 0.0
        while self.beat_at == beat_at and not self.stopping.is_set():
            stalled_s = time.monotonic() - beat_at
            if client is not None and stalled_s <= HOLD_S and time.monotonic() - refreshed_at >= self.refresh_every_s:
                await self._refresh(client, self._running())
                refreshed_at = time.monotonic()
            elif stalled_s > HOLD_S and refreshed_at >= 0:
                log.error("The event loop is still blocked after %g s: its jobs are left to reclaim.", HOLD_S)
                refreshed_at = -1.0
            await asyncio.sleep(BEAT_S)
        log.info("The event loop ran again after %.1f s blocked.", time.monotonic() - beat_at)

    def _running(self) -> dict[int, list[str]]:
        """The entries the slots hold (running or read ahead), by partition; read while the loop is blocked."""
        found: dict[int, list[str]] = {}
        try:
            for partition, entry_id in list(self.slots.started_at):
                found.setdefault(partition, []).append(entry_id)
        except RuntimeError:  # the loop moved on while we looked: it is not blocked
            return {}
        return found

    async def _describe(self, client: aioredis.Redis | None, running: dict[int, list[str]]) -> str:
        """``kind <kind> job <job_id> (entry <id>)`` for each running entry (read from its stream)."""
        said = []
        for partition, entry_ids in running.items():
            for entry_id in entry_ids[:5]:
                fields: dict[str, str] = {}
                found: Any = []
                if client is not None:
                    try:
                        found = await client.xrange(self.parts[partition].jobs, entry_id, entry_id)
                    except Exception as exc:
                        if not lost_connection(exc):
                            raise
                        found = []
                    fields = {text(k): text(v) for k, v in (found[0][1] if found else {}).items()}
                said.append(f"kind {fields.get('kind', '?')} job {fields.get('job_id', '?')} (entry {entry_id})")
        return ", ".join(said)

    async def _refresh(self, client: aioredis.Redis, running: dict[int, list[str]]) -> None:
        for partition, entry_ids in running.items():
            try:
                await Scripts(client, self.parts[partition]).refresh_claims(self.name, entry_ids)
            except Exception as exc:
                if not lost_connection(exc):
                    raise
