"""How far the read loop reads ahead of its free slots (``WORKER_PREFETCH`` is the ceiling).

A read that asks only for the free slots (often 1-3 at a high rate) pays a
round trip, and a Python-side read, for each few jobs, and a slot that frees
waits for the next round trip. Reading ahead keeps a small buffer of entries
(:attr:`worker.loop.slots.Slots.ahead`) that start the moment a slot frees,
topped up while the slots are busy.

The buffer covers a round trip at the current rate, twice over, and at least
5 ms of work: the rate (entries read per second, over windows of a tenth of a
second, or of :data:`WINDOW_ENTRIES` entries when they come sooner, so that a
backlog is read ahead from its first milliseconds, not after a tenth of a
second) times the larger of two reads' time and 5 ms, rounded down. Slow jobs
(under 200 a second) make no read-ahead at all, which keeps what a worker holds and has not started close to nothing
where it matters: an entry read ahead is pending and ours, so it must start
well within ``RECLAIM_IDLE_MS`` (the target never holds more than a tenth of
that time's worth at the current rate; the claim refresher covers the rest).
"""

from __future__ import annotations

#: The rate is measured over windows this long (seconds).
WINDOW_S = 0.1
#: ... or this many entries, when they are read sooner.
WINDOW_ENTRIES = 256
#: The buffer covers this many round trips at the current rate...
ROUND_TRIPS = 2.0
#: ... and at least this long (seconds) at the current rate.
MIN_COVER_S = 0.005
#: What is read ahead at the current rate starts within this share of RECLAIM_IDLE_MS.
IDLE_SHARE = 0.1


class ReadAhead:
    """The number of entries to read beyond the free slots (:attr:`target`), from the reads' own timing."""

    def __init__(self, ceiling: int = 0, reclaim_idle_ms: int = 60_000) -> None:
        self.ceiling = ceiling
        self.horizon_s = reclaim_idle_ms / 1000 * IDLE_SHARE
        self.target = 0
        """Entries to hold ahead of the slots now (0 until a window measured a rate)."""
        self._since = -1.0
        self._count = 0
        self._round_trip_s = 0.0

    def note(self, got: int, sent: float, now: float) -> None:
        """A read sent at ``sent`` returned ``got`` entries at ``now`` (monotonic seconds)."""
        if not self.ceiling:
            return
        if got:
            took = now - sent
            self._round_trip_s = took if not self._round_trip_s else 0.8 * self._round_trip_s + 0.2 * took
        if self._since < 0:
            self._since = now
        self._count += got
        elapsed = now - self._since
        if elapsed < WINDOW_S and (self._count < WINDOW_ENTRIES or elapsed <= 0):
            return
        rate = self._count / elapsed
        self._since, self._count = now, 0
        cover_s = min(max(self._round_trip_s * ROUND_TRIPS, MIN_COVER_S), self.horizon_s)
        self.target = min(self.ceiling, int(rate * cover_s))
