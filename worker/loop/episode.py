"""An episode of Redis refusing the worker's writes, and a decided outcome kept until it lands.

When Redis refuses a move (``OOM``, ``MISCONF``, ``READONLY``, ``NOPERM``, a
timeout, a lost connection: :mod:`worker.store.refusals`), the outcome the
worker decided is not lost and not decided again: :meth:`Episode.land` keeps
it and tries the same move again with the one backoff
(:func:`worker.store.reconnect.backoff_s`) until it lands or the worker stops.
The entry's slot stays taken meanwhile, so the waiting moves are bounded by
the slots and a full Redis stops new reads (backpressure, not a pile of
stranded entries); the claim refresher keeps the entry from looking idle, so
no other worker reclaims it and its handler does not run again.

Chores and reads refused the same way join the episode without a line of
their own. The episode says so once: one WARNING when it starts, with Redis's
reason; one INFO when nothing waits any more, with how many outcomes waited
and how long. :attr:`Episode.waiting` feeds the metric of outcomes waiting to
be recorded and the heartbeat that ``python -m worker health`` reads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from worker.store.keys import Keys
from worker.store.reconnect import backoff_s
from worker.store.refusals import describe_refusal, passes

log = logging.getLogger("worker")

T = TypeVar("T")

#: The longest wait between two tries of a kept move: memory back, outcomes land within about this.
RETRY_CAP_S = 1.0


class Episode:
    """The worker's current episode of refused writes, if any (see the module docstring)."""

    def __init__(self) -> None:
        self.troubles: dict[str, float] = {}
        """Who is refused now (an outcome ``outcome <partition>/<entry id>``, a chore, a read) -> since when."""
        self.waiting = 0
        """Outcomes waiting to be recorded now."""
        self.reason = ""
        """Redis's reason for the episode under way ("" when none is)."""
        self.ended_at = float("-inf")
        """When the last episode ended (monotonic seconds)."""
        self._started = 0.0
        self._waited = 0
        self._longest_s = 0.0

    @property
    def active(self) -> bool:
        return bool(self.troubles)

    def refused(self, who: str, exc: BaseException) -> None:
        """``who`` was refused (``exc``); the episode starts with one WARNING unless it is under way."""
        if who in self.troubles:
            return
        now = time.monotonic()
        if not self.troubles:
            self._started, self._waited, self._longest_s = now, 0, 0.0
            self.reason = describe_refusal(exc)
            log.warning(
                "Redis refuses writes: %s. Decided outcomes are kept and retried with backoff "
                "(their jobs do not run again); reads wait for free slots.",
                self.reason,
            )
        self.troubles[who] = now

    def accepted(self, who: str) -> None:
        """``who``'s write landed; the episode ends with one INFO when nothing else is refused."""
        since = self.troubles.pop(who, None)
        if since is None:
            return
        if who.startswith("outcome "):
            self._longest_s = max(self._longest_s, time.monotonic() - since)
        if not self.troubles:
            self._end()

    def forget(self, who: str) -> None:
        """``who`` gave up (the worker is stopping): no longer waiting, and no end line for it."""
        self.troubles.pop(who, None)
        if not self.troubles:
            self.reason = ""

    def _end(self) -> None:
        self.ended_at = time.monotonic()
        log.info(
            "Redis accepts writes again after %.1f s (%s): %d outcomes waited to be recorded, the longest %.1f s.",
            time.monotonic() - self._started,
            self.reason.split(" ", 1)[0],
            self._waited,
            self._longest_s,
        )
        self.reason = ""

    async def land(self, key: str, move: Callable[[], Awaitable[T]]) -> T:
        """``await move()`` until it lands: after an error that passes (a refusal, a timeout, a lost
        connection) the outcome ``key`` waits, counted in :attr:`waiting`, and the same move is tried again
        with backoff. Any other error is raised; so is a cancellation (the worker is stopping)."""
        try:
            return await move()
        except Exception as exc:
            if not passes(exc):
                raise
            first = exc
        who = f"outcome {key}"
        self.waiting += 1
        self.refused(who, first)
        self._waited += 1
        failures = 0
        try:
            while True:
                failures += 1
                await asyncio.sleep(backoff_s(failures, cap_s=RETRY_CAP_S))
                try:
                    result = await move()
                except Exception as exc:
                    if not passes(exc):
                        raise
                    continue
                self.accepted(who)
                return result
        except BaseException:
            self.forget(who)
            raise
        finally:
            self.waiting -= 1


def outcome_key(keys: Keys, entry_id: str) -> str:
    """An outcome's name in the episode (:meth:`Episode.land`'s ``key``): queue, partition and entry."""
    return f"{keys.queue}/{keys.partition}/{entry_id}"
