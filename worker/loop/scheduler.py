"""The scheduler chore: every worker wakes about once a second and enqueues what is due.

Exactly one enqueue per tick, whatever the number of workers: the lock belongs
to the tick (``sched:<name>:<tick-epoch>``, taken with SET NX in the same Lua
script as the XADD, ``worker/store/lua/schedule_tick.lua``; with partitions, every worker
puts a tick in the partition of ``<name>:<tick>``, lock and job alike). Its lifetime is longer
than the catch-up window plus twice the tolerated clock skew plus one
interval, so a worker whose clock is late, or that wakes late, finds the lock
still there; nothing has to line up with the next tick (a lock per schedule
with a fixed lifetime, ``SET sched:<name> NX EX 55``, would enqueue twice as
soon as clocks drift; docs/worker.md, "Schedules").

Each worker keeps a cursor per schedule: the instant up to which it has
looked. A wake considers the ticks after the cursor up to its clock's now, so
a late wake misses nothing. On start the cursor is now minus the schedule's
catch-up window: a tick missed while no worker ran is enqueued once by the
first worker to start within that window. A wake never looks further back
than ``max(catch-up window, LATE_WAKE_S)``, so a stalled process or a clock
that jumps forward does not replay a day of ticks.

``from worker import schedule`` declares a schedule (see :mod:`worker.schedules`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from worker.app import Chore
from worker.errors import UnknownKind
from worker.schedules import Schedule, iso_utc
from worker.store.enqueue import job_fields
from worker.store.keys import Keys, partition_of
from worker.store.partitions import partition_keys
from worker.store.queues import DEFAULT_QUEUE
from worker.store.scripts import Scripts
from worker.store.server_clock import CLOCK
from worker.store.trace_context import sending

if TYPE_CHECKING:
    from worker.app import WorkerApp
    from worker.kinds import Registry

log = logging.getLogger("worker.loop.scheduler")

#: The clock skew between workers that the tick locks tolerate (tests use ±5 s).
MAX_CLOCK_SKEW_S = 30.0
#: How far back a wake looks at least, whatever the catch-up window: covers slow wakes.
LATE_WAKE_S = 60.0
#: Roughly how often the chore wakes (with the chore's ±10 % jitter).
WAKE_INTERVAL_S = 1.0
#: A tick enqueued later than this after its time is logged as caught up.
LATE_LOG_S = 5.0


class TickObserver(Protocol):
    """What the scheduler reports about each due tick (metrics implement it)."""

    def tick_enqueued(self, schedule: str) -> None: ...

    def tick_skipped(self, schedule: str) -> None: ...


class Scheduler:
    """Enqueues the ticks of ``schedules`` that fall due on this worker's clock."""

    def __init__(
        self,
        redis: Any,
        keys: Keys | Sequence[Keys],
        schedules: Iterable[Schedule],
        *,
        owner: str,
        default_tz: str = "UTC",
        clock: Callable[[], float] | None = None,
        observers: Iterable[TickObserver] = (),
        queue_of: Mapping[str, str] | None = None,
    ) -> None:
        """``keys``: the partitions of each queue a schedule's kind goes to; ``queue_of``: each kind's named
        queue (absent: ``default``)."""
        self.redis = redis
        self.partitions = [keys] if isinstance(keys, Keys) else list(keys)
        self.schedules = sorted(schedules, key=lambda s: s.name)
        self.owner = owner
        self.default_tz = default_tz
        self.clock = clock or CLOCK.now
        self.server_time = clock is None
        """Each wake measures Redis's clock first (a given ``clock``, for tests, is used as it is)."""
        self.observers = list(observers)
        self.scripts = [Scripts(redis, k) for k in self.partitions]
        self.queue_of = dict(queue_of or {})
        self._scripts_of: dict[str, list[Scripts]] = {}
        for scripts in self.scripts:
            self._scripts_of.setdefault(scripts.keys.queue, []).append(scripts)
        self._cursor: dict[str, float] = {}
        self._next: dict[str, float] = {}

    def lookback_s(self, s: Schedule, now: float) -> float:
        """The furthest back a wake at ``now`` looks for due ticks of ``s``."""
        return max(s.catch_up_window_s(now, self.default_tz), LATE_WAKE_S)

    def lock_ttl_s(self, s: Schedule, tick: float) -> int:
        """The tick lock's lifetime: lookback + one interval + skew either way."""
        return math.ceil(self.lookback_s(s, tick) + s.interval_s(tick, self.default_tz) + 2 * MAX_CLOCK_SKEW_S)

    async def wake(self) -> int:
        """Enqueue every tick due since the last wake; return how many this worker enqueued."""
        if self.server_time:
            await CLOCK.measure(self.redis)
        now = self.clock()
        enqueued = 0
        for s in self.schedules:
            cursor = self._cursor.get(s.name)
            if cursor is None:
                cursor = now - s.catch_up_window_s(now, self.default_tz)
            elif now < self._next[s.name]:
                continue
            lower = max(cursor, now - self.lookback_s(s, now))
            for tick in s.ticks(lower, now, self.default_tz):
                if await self._enqueue(s, tick, now):
                    enqueued += 1
                    for observer in self.observers:
                        observer.tick_enqueued(s.name)
                else:  # another worker holds this tick's lock
                    for observer in self.observers:
                        observer.tick_skipped(s.name)
                self._cursor[s.name] = tick
            self._cursor[s.name] = max(cursor, now)
            self._next[s.name] = s.next_tick(self._cursor[s.name], self.default_tz)
        return enqueued

    async def _enqueue(self, s: Schedule, tick: float, now: float) -> bool:
        scheduled_for = iso_utc(tick)
        # Every worker puts the tick (its lock and its job) in the same partition of the kind's queue: one
        # lock per tick.
        parts = self._scripts_of[self.queue_of.get(s.kind, DEFAULT_QUEUE)]
        scripts = parts[partition_of(f"{s.name}:{int(tick)}", len(parts))]
        # When the worker traces, the tick starts the job's trace (a span in each worker that tried the lock).
        with sending(Keys(scripts.keys.prefix, queue=scripts.keys.queue).jobs, 1, "schedule", root=True) as context:
            fields = job_fields(s.kind, {**s.fields, "scheduled_for": scheduled_for, "schedule": s.name}, context)
            entry_id = await scripts.schedule_tick(s.name, int(tick), self.owner, self.lock_ttl_s(s, tick), fields)
        if not entry_id:
            return False
        late_s = now - tick
        log.info(
            "Scheduled %s for %s%s as job %s.",
            s.name if s.name == s.kind else f"{s.name} (kind {s.kind})",
            scheduled_for,
            f", caught up {late_s:.0f} s late" if late_s > LATE_LOG_S else "",
            fields["job_id"],
            extra={"kind": s.kind, "job_id": fields["job_id"], "outcome": "scheduled"},
        )
        return True


def describe(s: Schedule, default_tz: str) -> str:
    """``expire_holds every 60 s (catch-up: the last tick)``, for the start-up log line."""
    name = s.name if s.name == s.kind else f"{s.name} (kind {s.kind})"
    when = f"every {s.every_s} s" if s.every_s is not None else f"'{s.cron}' {s.tz or default_tz}"
    catch_up = "the last tick" if s.catch_up_s is None else ("none" if s.catch_up_s == 0 else f"{s.catch_up_s:g} s")
    return f"{name} {when} (catch-up: {catch_up})"


def scheduler_chore(app: WorkerApp, registry: Registry, observers: Iterable[TickObserver] = ()) -> Chore | None:
    """The scheduler of ``registry``'s schedules as a chore of this worker, or None: no schedules, ``--burst``,
    or ``SCHEDULER=off``."""
    schedules = list(registry.schedules.values())
    if not schedules or app.burst or not app.settings.scheduler:
        return None
    for s in schedules:
        if s.kind not in registry.kinds:
            known = ", ".join(sorted(registry.kinds)) or "none"
            raise UnknownKind(
                f"schedule {s.name!r} enqueues kind {s.kind!r}, which no imported module declares "
                f"(known: {known}); import the kind's module via WORKER_KINDS"
            )
    queue_of = {s.kind: registry.kinds[s.kind].queue for s in schedules}
    scheduler = Scheduler(
        app.redis,
        [keys for queue in sorted({DEFAULT_QUEUE, *queue_of.values()}) for keys in partition_keys(app.settings, queue)],
        schedules,
        owner=app.settings.worker_name,
        default_tz=app.settings.schedule_tz,
        observers=observers,
        queue_of=queue_of,
    )
    log.info(
        "Scheduler on: %s.",
        "; ".join(describe(s, app.settings.schedule_tz) for s in scheduler.schedules),
    )

    async def wake() -> None:
        await scheduler.wake()

    return Chore("scheduler", WAKE_INTERVAL_S, wake)
