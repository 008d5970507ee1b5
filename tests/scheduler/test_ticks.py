"""Which instants are a schedule's ticks: intervals, cron, DST days, catch-up windows (no Redis)."""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from worker.kinds import Registry
from worker.schedules import Schedule, ScheduleError, iso_utc, schedule

PRAGUE = ZoneInfo("Europe/Prague")


def epoch(*args: int, tz: ZoneInfo = PRAGUE) -> float:
    return datetime(*args, tzinfo=tz).timestamp()


def local(ticks: list[float]) -> list[datetime]:
    return [datetime.fromtimestamp(t, PRAGUE) for t in ticks]


def test_every_s_ticks_fall_on_multiples_of_the_interval() -> None:
    s = Schedule("t", "k", every_s=60)
    assert s.ticks(1_000_000_000.5, 1_000_000_240.0) == [1_000_000_020.0, 1_000_000_080.0, 1_000_000_140.0,
                                                           1_000_000_200.0]  # fmt: skip
    assert s.ticks(1_000_000_020.0, 1_000_000_020.0) == []
    assert s.ticks(1_000_000_019.9, 1_000_000_020.0) == [1_000_000_020.0]


@pytest.mark.parametrize(("day", "offsets"), [((2026, 3, 29), {1, 2}), ((2026, 10, 25), {1, 2})])
def test_daily_0300_in_prague_runs_once_on_each_local_day_around_dst(day: tuple[int, int, int], offsets: set) -> None:
    s = Schedule("r", "k", cron="0 3 * * *", tz="Europe/Prague")
    start = datetime(*day, tzinfo=PRAGUE) - timedelta(days=3)
    ticks = local(s.ticks(start.timestamp(), (start + timedelta(days=6)).timestamp()))
    per_day = Counter(t.date() for t in ticks)
    assert len(per_day) == 6 and set(per_day.values()) == {1}
    assert all((t.hour, t.minute) == (3, 0) for t in ticks)
    assert {int(t.utcoffset().total_seconds() // 3600) for t in ticks} == offsets  # type: ignore[union-attr]


def test_a_daily_time_in_the_repeated_autumn_hour_runs_once() -> None:
    s = Schedule("r", "k", cron="30 2 * * *", tz="Europe/Prague")
    ticks = local(s.ticks(epoch(2026, 10, 23, 12), epoch(2026, 10, 27, 12)))
    assert [t.date().isoformat() for t in ticks] == ["2026-10-24", "2026-10-25", "2026-10-26", "2026-10-27"]
    assert ticks[1].utcoffset() == timedelta(hours=2)  # the first 02:30 of the day, summer time


def test_a_daily_time_skipped_by_the_spring_change_still_runs_that_day() -> None:
    s = Schedule("r", "k", cron="30 2 * * *", tz="Europe/Prague")
    ticks = local(s.ticks(epoch(2026, 3, 27, 12), epoch(2026, 3, 31, 12)))
    assert [t.date().isoformat() for t in ticks] == ["2026-03-28", "2026-03-29", "2026-03-30", "2026-03-31"]


def test_an_hourly_schedule_runs_in_both_repeated_hours_and_skips_the_missing_one() -> None:
    s = Schedule("h", "k", cron="0 * * * *", tz="Europe/Prague")
    autumn = s.ticks(epoch(2026, 10, 25, 0) - 1, epoch(2026, 10, 26, 0) - 1)
    spring = s.ticks(epoch(2026, 3, 29, 0) - 1, epoch(2026, 3, 30, 0) - 1)
    assert (len(autumn), len(spring)) == (25, 23)
    assert all(b - a == 3600 for a, b in itertools.pairwise(autumn))


def test_interval_and_catch_up_window() -> None:
    daily = Schedule("r", "k", cron="0 3 * * *", tz="Europe/Prague")
    assert daily.interval_s(epoch(2026, 6, 1, 12)) == 86_400
    assert daily.interval_s(epoch(2026, 3, 29, 1)) == 82_800  # 03:00 to 03:00 over the spring change: 23 hours
    assert daily.interval_s(epoch(2026, 10, 25, 1)) == 90_000  # and over the autumn change: 25 hours
    assert daily.interval_s(epoch(2026, 6, 1, 3)) == 86_400  # exactly on a tick: the interval it starts
    assert daily.catch_up_window_s(epoch(2026, 6, 1, 12)) == 86_400
    assert Schedule("r", "k", cron="0 3 * * *", catch_up_s=0).catch_up_window_s(0) == 0
    assert Schedule("e", "k", every_s=60).catch_up_window_s(0) == 60


def test_the_default_time_zone_applies_to_cron_schedules_that_name_none() -> None:
    s = Schedule("r", "k", cron="0 3 * * *")
    start = epoch(2026, 6, 1, 0, tz=ZoneInfo("UTC"))
    assert iso_utc(s.ticks(start, start + 86_400)[0]) == "2026-06-01T03:00:00Z"
    assert iso_utc(s.ticks(start, start + 86_400, "Europe/Prague")[0]) == "2026-06-01T01:00:00Z"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of cron"),
        ({"cron": "0 3 * * *", "every_s": 60}, "exactly one of cron"),
        ({"every_s": 0}, "every_s must be a whole number"),
        ({"every_s": 1.5}, "every_s must be a whole number"),
        ({"cron": "at three"}, "is not a cron expression"),
        ({"every_s": 60, "tz": "Mars/Olympus"}, "not a known time zone"),
        ({"every_s": 60, "catch_up_s": -1}, "catch_up_s must be >= 0"),
        ({"every_s": 60, "fields": {"job_id": "x"}}, "may not set job_id"),
    ],
)
def test_invalid_declarations_say_what_is_wrong(kwargs: dict, message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        schedule("s", "k", registry=Registry(), **kwargs)


def test_declaring_registers_once_and_refuses_a_different_twin() -> None:
    registry = Registry()
    first = schedule("s", "k", every_s=60, fields={"n": 1}, registry=registry)
    assert schedule("s", "k", every_s=60, fields={"n": 1}, registry=registry) == first
    assert registry.schedules == {"s": first} and first.fields == {"n": "1"}
    with pytest.raises(ScheduleError, match="declared twice"):
        schedule("s", "k", every_s=30, registry=registry)


def test_iso_utc() -> None:
    assert iso_utc(datetime(2026, 10, 25, 1, 0, tzinfo=UTC).timestamp()) == "2026-10-25T01:00:00Z"
