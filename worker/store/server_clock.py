"""The server's clock: Redis ``TIME`` as this worker sees it, so a worker's wrong clock changes nothing.

Schedule ticks, the promotion of delayed jobs and the run time of retries
are all compared with scores and locks other workers share; each worker
reading its own clock doubles a tick or runs a delayed job early as soon as
one clock is off by more than the schedule allows (a worker 130 s ahead
enqueued 27 of 287 per-second ticks twice). :class:`ServerClock` keeps this
worker's offset from Redis's ``TIME`` (measured at start, with each
heartbeat, and by the scheduler at each wake), and :meth:`ServerClock.now`
is the local clock moved by it. Past ``WARN_S`` it says so once (and once
when the clock is back within it); the offset is also the metric
``<ns>_clock_offset_seconds``.

One clock per process (:data:`CLOCK`): the offset is the machine's, whoever asks.
"""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger("worker")

#: An offset beyond this many seconds is said in the log.
WARN_S = 2.0


class ServerClock:
    """This process's offset from Redis's clock (see the module docstring)."""

    def __init__(self) -> None:
        self.offset_s = 0.0
        """Redis's time minus this machine's, seconds (0 until measured)."""
        self._warned = False

    def now(self) -> float:
        """Redis's time now, epoch seconds, as of the last measure."""
        return time.time() + self.offset_s

    async def measure(self, client: Any) -> float:
        """Ask Redis ``TIME`` (an asyncio client) and keep the offset, halfway through the round trip."""
        before = time.time()
        seconds, micros = await client.time()
        after = time.time()
        self.offset_s = int(seconds) + int(micros) / 1e6 - (before + after) / 2
        off = abs(self.offset_s) > WARN_S
        if off and not self._warned:
            log.warning(
                "This machine's clock is %+.1f s off Redis's (more than %g s): schedule ticks, delayed jobs and "
                "retries follow Redis's clock; fix this machine's time (NTP).",
                -self.offset_s,
                WARN_S,
            )
        elif self._warned and not off:
            log.info("This machine's clock is back within %g s of Redis's (%+.1f s).", WARN_S, -self.offset_s)
        self._warned = off
        return self.offset_s


CLOCK = ServerClock()
"""The process's server clock."""
