"""Shutdown bounded by its grace, also when Redis or PostgreSQL hangs.

On SIGTERM the worker stops reading and gives running jobs
``SHUTDOWN_GRACE_S``; then it says goodbye: the last acknowledgements, its
heartbeat's removal, the flow counters, the metrics lock, the archive's last
run. Each of those waits on a server; a frozen one (SIGSTOPped, or behind a
network that lost the connection without a word) would hold every step for
its socket timeout and retries, one after another. :class:`StopDeadline`
caps the whole: ``STOP_EXTRA_S`` after the grace the goodbye is cut short
with one WARNING and the process exits 0. Nothing decided is lost by that:
what was not recorded stays pending, and reclaim runs it again elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

log = logging.getLogger("worker")

#: How long the goodbye may take after SHUTDOWN_GRACE_S, at most.
STOP_EXTRA_S = 5.0
#: How many times the cut-short goodbye is cancelled, 0.1 s apart, before the process leaves it behind.
CANCELS = 20


class StopDeadline:
    """Runs the worker (:meth:`guard`); once :meth:`arm` ed by a stop, cuts it short after the grace plus
    ``extra_s``."""

    def __init__(self, grace_s: float, extra_s: float = STOP_EXTRA_S) -> None:
        self.grace_s = grace_s
        self.extra_s = extra_s
        self._expired = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None

    def arm(self) -> None:
        """The worker is stopping: the deadline starts now (a second stop changes nothing)."""
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.grace_s + self.extra_s, self._expired.set)

    async def guard(self, main: Awaitable[None]) -> None:
        """Await ``main`` (its error propagates), or leave it, cancelled, when the deadline passes."""
        task = asyncio.ensure_future(main)
        expired = asyncio.ensure_future(self._expired.wait())
        try:
            await asyncio.wait({task, expired}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            expired.cancel()
        if task.done():
            return task.result()
        log.warning(
            "The worker did not finish stopping within SHUTDOWN_GRACE_S=%g s + %g s (Redis or PostgreSQL does "
            "not answer); leaving now: what was not recorded stays pending, for reclaim to run again.",
            self.grace_s,
            self.extra_s,
        )
        for _ in range(CANCELS):  # again at each await that catches it (an exit stack's callbacks, a finally)
            task.cancel()
            await asyncio.wait({task}, timeout=0.1)
            if task.done():
                break
        task.add_done_callback(lambda done: done.cancelled() or done.exception())
        return None
