"""Periodic jobs declared in code next to their kinds, and the ticks they fall on.

A module declares a schedule beside the kind it enqueues::

    schedule("expire_holds", "expire_holds", every_s=60)
    schedule("reconcile_payments", "reconcile_payments", cron="0 3 * * *", catch_up_s=0)

This module is pure (no Redis, no clock of its own): it knows which instants
are a schedule's ticks, so the DST days and the catch-up windows are tested
without waiting. :mod:`worker.loop.scheduler` is the chore that enqueues them.

- ``every_s`` ticks fall on multiples of ``every_s`` since the Unix epoch
  (``every_s=60``: each minute at :00 UTC).
- ``cron`` ticks come from croniter in the schedule's time zone (``tz``, else
  ``SCHEDULE_TZ``). A daily time that a DST change skips (02:30 on the spring
  day in Europe/Prague) runs once, at the first instant after the gap
  (croniter's choice); a time that the autumn change repeats runs once, on its
  first occurrence, unless the hour field is ``*`` (an hourly job runs in both
  hours, as in Vixie cron).
- ``catch_up_s``: on start, a tick missed while no worker ran is enqueued if it
  is at most this old. None means one interval (the most recent tick is always
  caught up); 0 means none.

croniter is imported by the functions that need it, on the first ``cron``
schedule: a worker (or ``python -m worker health``) without one does not pay
its import (about 15 ms) at every start.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from worker.kinds import REGISTRY, Registry


class ScheduleError(ValueError):
    """A schedule declaration is invalid (the message says what would be valid)."""


@dataclass(frozen=True)
class Schedule:
    """One periodic job: which kind, when, in which time zone, with which fields."""

    name: str
    kind: str
    cron: str | None = None
    every_s: int | None = None
    tz: str | None = None
    fields: Mapping[str, str] = field(default_factory=dict)
    catch_up_s: float | None = None

    def zone(self, default_tz: str = "UTC") -> ZoneInfo:
        return ZoneInfo(self.tz or default_tz)

    def ticks(self, after: float, until: float, default_tz: str = "UTC") -> list[float]:
        """The ticks ``t`` with ``after < t <= until`` (epoch seconds), oldest first."""
        out: list[float] = []
        for tick in self._ticks_after(after, default_tz):
            if tick > until:
                return out
            out.append(tick)
        raise AssertionError("unreachable: a schedule has no last tick")

    def next_tick(self, after: float, default_tz: str = "UTC") -> float:
        """The first tick strictly after ``after``."""
        return next(self._ticks_after(after, default_tz))

    def _ticks_after(self, after: float, default_tz: str) -> Iterator[float]:
        if self.every_s is not None:
            tick = (math.floor(after / self.every_s) + 1) * self.every_s
            while True:
                yield float(tick)
                tick += self.every_s
        from croniter import croniter

        zone = self.zone(default_tz)
        assert self.cron is not None
        hourly_or_finer = croniter(self.cron).expanded[1] == ["*"]
        it = croniter(self.cron, datetime.fromtimestamp(after, zone))
        while True:
            at = it.get_next(datetime)
            if hourly_or_finer or not _repeated_wall_time(at, zone):
                yield at.timestamp()

    def interval_s(self, at: float, default_tz: str = "UTC") -> float:
        """The length of the interval holding ``at``: ``every_s``, or the gap between the cron ticks around it."""
        if self.every_s is not None:
            return float(self.every_s)
        from croniter import croniter

        zone = self.zone(default_tz)
        assert self.cron is not None
        following = croniter(self.cron, datetime.fromtimestamp(at, zone)).get_next(datetime)
        previous = croniter(self.cron, following).get_prev(datetime)
        return following.timestamp() - previous.timestamp()

    def catch_up_window_s(self, at: float, default_tz: str = "UTC") -> float:
        """How old a missed tick may be and still be enqueued by a worker starting at ``at``."""
        return self.interval_s(at, default_tz) if self.catch_up_s is None else float(self.catch_up_s)


def _valid_cron(cron: str) -> bool:
    from croniter import croniter

    return bool(croniter.is_valid(cron))


def _repeated_wall_time(tick: datetime, zone: ZoneInfo) -> bool:
    """True for the second occurrence of a wall time that the autumn DST change repeats."""
    wall = tick.astimezone(zone).replace(tzinfo=None)
    first = wall.replace(tzinfo=zone, fold=0).timestamp()
    return first != tick.timestamp()


def schedule(
    name: str,
    kind: str,
    *,
    cron: str | None = None,
    every_s: int | None = None,
    tz: str | None = None,
    fields: Mapping[str, str | int | float] | None = None,
    catch_up_s: float | None = None,
    registry: Registry | None = None,
) -> Schedule:
    """Declare a periodic job: enqueue ``kind`` with ``fields`` at each tick.

    Give exactly one of ``cron`` (five fields, e.g. ``"0 3 * * *"``) or
    ``every_s`` (whole seconds). The job also carries ``scheduled_for`` (the
    tick, ISO-8601 UTC) and ``schedule`` (this name).
    """
    if not name or not isinstance(name, str) or ":" in name:
        raise ScheduleError(f"a schedule name must be a non-empty string without ':', got {name!r}")
    if not kind or not isinstance(kind, str):
        raise ScheduleError(f"schedule {name!r}: kind must be a non-empty string, got {kind!r}")
    if (cron is None) == (every_s is None):
        raise ScheduleError(f"schedule {name!r}: give exactly one of cron='0 3 * * *' or every_s=60")
    if every_s is not None and (isinstance(every_s, bool) or not isinstance(every_s, int) or every_s < 1):
        raise ScheduleError(f"schedule {name!r}: every_s must be a whole number of seconds >= 1, got {every_s!r}")
    if cron is not None and not _valid_cron(cron):
        raise ScheduleError(f"schedule {name!r}: {cron!r} is not a cron expression; e.g. '0 3 * * *' (03:00 daily)")
    if tz is not None:
        try:
            ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError):
            raise ScheduleError(f"schedule {name!r}: {tz!r} is not a known time zone; e.g. Europe/Prague") from None
    if catch_up_s is not None and catch_up_s < 0:
        raise ScheduleError(f"schedule {name!r}: catch_up_s must be >= 0 (0: no catch-up), got {catch_up_s!r}")
    reserved = {"kind", "job_id", "attempts", "scheduled_for", "schedule"} & set(fields or {})
    if reserved:
        raise ScheduleError(f"schedule {name!r}: fields may not set {', '.join(sorted(reserved))}")
    declared = Schedule(
        name=name,
        kind=kind,
        cron=cron,
        every_s=every_s,
        tz=tz,
        fields={str(k): str(v) for k, v in (fields or {}).items()},
        catch_up_s=catch_up_s,
    )
    target = registry or REGISTRY
    existing = target.schedules.get(name)
    if existing is not None and existing != declared:
        raise ScheduleError(f"schedule {name!r} is declared twice, differently: {existing} and {declared}")
    target.schedules[name] = declared
    return declared


def iso_utc(epoch: float) -> str:
    """A tick as ``scheduled_for``: ISO-8601 in UTC with a Z, whole seconds."""
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
