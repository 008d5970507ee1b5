"""The one time grammar of ``since`` / ``until``: what an analyst types, read in the display zone, bounded.

Every reader (Python, the CLI, the panel) reads a typed time through
:func:`parse_since`, so ``9pm`` means the same thing everywhere. The forms:

* an ISO time: ``2026-12-01``, ``2026-12-01 21:00``, ``2026-12-01T21:00:30Z``,
  ``2026-12-01T21:00+01:00``, or one followed by a zone name
  (``2026-12-01 21:00 Europe/Prague``, ``... UTC``); a datetime or
  ``pd.Timestamp``;
* a duration back from now: ``2h``, ``30min``, ``3d``, ``90s``, ``1.5h``, a
  timedelta; ``now``;
* ``today`` and ``yesterday`` (midnight starting that day);
* a time of day: ``21:00``, ``21:00:30``, ``9pm``, ``9:30am``: its latest
  occurrence not after now (at 04:30, ``9pm`` is last night's);
* a day and a time of day: ``today 21:00``, ``yesterday 9pm``.

Times without a zone are read in the display zone (``OPSLIB_TZ`` /
:func:`opslib.set_display_tz`). Anything else, a time before 1970, or one
more than a day ahead of now is refused with one line naming the forms
(:data:`FORMS`): ``pd.Timestamp("9pm")`` would read year 1 and let a reader
ask Redis for two thousand years of periods.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import numpy as np
import pandas as pd

from opslib.display import check_tz, display_tz, local_time
from opslib.errors import OpslibError

#: A duration back from now as people type it: ``2h``, ``30min``, ``3d``, ``90s``, ``1.5h``.
DURATION = re.compile(r"^(?P<count>\d+(\.\d+)?)\s*(?P<unit>d|days?|h|hours?|min|minutes?|m|s|seconds?)$")
UNITS = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}
#: A 24-hour time of day: ``15:46``, ``15:46:30``.
TIME_OF_DAY = re.compile(r"^(?P<hour>\d{1,2}):(?P<minute>\d{2})(:(?P<second>\d{2}(\.\d+)?))?$")
#: A 12-hour time of day: ``9pm``, ``9:30 am``, ``12am`` (midnight).
CLOCK_12H = re.compile(r"^(?P<hour>\d{1,2})(:(?P<minute>\d{2}))?\s*(?P<half>am|pm)$")
#: An ISO date, with a time and an offset or not (what ``pd.Timestamp`` is trusted to read).
ISO = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?)?(Z|[+-]\d{2}(:?\d{2})?)?$")
DAYS = {"today": 0, "yesterday": 1}
EARLIEST = pd.Timestamp("1970-01-01", tz="UTC")
AHEAD = pd.Timedelta(days=1)
"""How far ahead of now a typed time may be (an ``until`` a little ahead is fine; next year is a typo)."""
FORMS = (
    "an ISO time ('2026-12-01 21:00', '2026-12-01T21:00Z', '... Europe/Prague'), a duration back from now "
    "('2h', '30min', '3d'), 'today', 'yesterday', a time of day ('21:00', '9pm'), or 'yesterday 21:00'"
)


def parse_since(since: object, name: str = "since") -> pd.Timestamp | None:
    """A UTC timestamp from what was typed after ``since=`` / ``until=`` (the forms of the module docstring).

    ``name`` is the argument's name in the message. ``None`` stays ``None``.

    >>> parse_since("yesterday 21:00")   # in OPSLIB_TZ, as UTC
    """
    if since is None:
        return None
    now = pd.Timestamp.now(tz="UTC")
    when = read_typed(since, now)
    if when is None:
        raise OpslibError(
            f"{name}={since!r} is not a time; give {FORMS}, read in {display_tz()} unless it names a zone"
        )
    if when < EARLIEST or when > now + AHEAD:
        raise OpslibError(
            f"{name}={since!r} reads as {local_time(when)}, before 1970 or more than a day ahead; give {FORMS}"
        )
    return when


def check_window(since: object, until: object) -> tuple[pd.Timestamp | None, pd.Timestamp | None]:
    """``since`` and ``until`` as UTC times (the forms of :func:`parse_since`), in order."""
    start, end = parse_since(since), parse_since(until, "until")
    if start is not None and end is not None and end <= start:
        raise OpslibError(f"until ({local_time(end)}) must be after since ({local_time(start)})")
    return start, end


def read_typed(value: object, now: pd.Timestamp) -> pd.Timestamp | None:
    """``value`` as a UTC time, or ``None`` when it is none of the forms."""
    if isinstance(value, timedelta | pd.Timedelta | np.timedelta64):
        return now - pd.Timedelta(value)
    if isinstance(value, datetime | np.datetime64):
        when = pd.Timestamp(value)
        return when if when.tzinfo is not None else in_zone(when, display_tz(), value)
    if not isinstance(value, str):
        return None
    typed = " ".join(value.strip().lower().split())
    if typed == "now":
        return now
    duration = DURATION.match(typed)
    if duration:
        return now - pd.Timedelta(**{UNITS[duration["unit"][0]]: float(duration["count"])})
    head, _, tail = value.strip().rpartition(" ")
    zone = display_tz()
    if head and ("/" in tail or tail in ("UTC", "GMT")):
        zone, typed = check_tz(tail), " ".join(head.lower().split())
    return wall_time(typed, zone, now)


def wall_time(typed: str, zone: str, now: pd.Timestamp) -> pd.Timestamp | None:
    """A day word, a time of day, both, or an ISO time (lower-cased ``typed``), read in ``zone``, in UTC."""
    if ISO.match(typed.upper()):
        when = pd.Timestamp(typed.upper())
        return when.tz_convert("UTC") if when.tzinfo is not None else in_zone(when, zone, typed)
    day, _, clock = typed.partition(" ")
    local_now = now.tz_convert(zone)
    if day in DAYS:
        midnight = local_now.normalize().tz_localize(None) - pd.Timedelta(days=DAYS[day])
        if not clock:
            return in_zone(midnight, zone, typed)
        offset = clock_offset(clock)
        return None if offset is None else in_zone(midnight + offset, zone, typed)
    offset = clock_offset(typed)
    if offset is None:
        return None
    today = local_now.normalize().tz_localize(None)
    when = in_zone(today + offset, zone, typed)
    return when if when <= now else in_zone(today - pd.Timedelta(days=1) + offset, zone, typed)


def clock_offset(clock: str) -> pd.Timedelta | None:
    """A time of day (``21:00``, ``21:00:30``, ``9pm``, ``12am``) as the time since midnight; ``None`` if not one."""
    match = TIME_OF_DAY.match(clock) or CLOCK_12H.match(clock)
    if match is None:
        return None
    parts = match.groupdict()
    hour, minute = int(parts["hour"]), int(parts["minute"] or 0)
    if parts.get("half"):
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if parts["half"] == "pm" else 0)
    seconds = float(parts.get("second") or 0)
    if hour > 23 or minute > 59 or seconds >= 60:
        return None
    return pd.Timedelta(hours=hour, minutes=minute, seconds=seconds)


def in_zone(when: pd.Timestamp, zone: str, typed: object) -> pd.Timestamp:
    """``when`` (a wall-clock time) read in ``zone``, in UTC; a time the clocks skip or pass twice is refused."""
    try:
        return when.tz_localize(zone).tz_convert("UTC")
    except ValueError:  # pandas' AmbiguousTimeError and NonExistentTimeError
        raise OpslibError(
            f"{typed!r} is not one instant in {zone} (the clocks change then); add an offset, "
            "e.g. '2026-10-25 02:30+01:00'"
        ) from None
