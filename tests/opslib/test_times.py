"""One time rule: a time the analyst types is read in the display zone unless it names its own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest
import redis

import opslib
from opslib.checks import parse_since
from tests.opslib.helpers import bury
from worker.store.keys import Keys


@pytest.fixture(autouse=True)
def prague(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("OPSLIB_TZ", raising=False)
    opslib.set_display_tz("Europe/Prague")
    yield
    opslib.set_display_tz(None)


def test_a_time_without_a_zone_is_read_in_the_display_zone() -> None:
    assert parse_since("2026-12-01 15:46") == pd.Timestamp("2026-12-01 14:46", tz="UTC")
    assert parse_since(pd.Timestamp("2026-12-01 15:46")) == pd.Timestamp("2026-12-01 14:46", tz="UTC")
    assert parse_since("15:46") == latest("15:46:00")


def latest(clock: str) -> pd.Timestamp:
    """The latest ``clock`` in Prague not after now, in UTC: how a time of day alone is read."""
    today = pd.Timestamp.now(tz="Europe/Prague").normalize().tz_localize(None)
    when = (today + pd.Timedelta(clock)).tz_localize("Europe/Prague").tz_convert("UTC")
    return when if when <= pd.Timestamp.now(tz="UTC") else parse_since(f"yesterday {clock}")


def midnight(days_back: int) -> pd.Timestamp:
    today = pd.Timestamp.now(tz="Europe/Prague").normalize().tz_localize(None)
    return (today - pd.Timedelta(days=days_back)).tz_localize("Europe/Prague").tz_convert("UTC")


@pytest.mark.parametrize(
    ("typed", "clock"),
    [("9pm", "21:00:00"), ("9PM", "21:00:00"), ("9:30am", "09:30:00"), ("12am", "00:00:00"), ("12pm", "12:00:00"),
     ("21:00", "21:00:00"), ("21:00:30", "21:00:30")],
)  # fmt: skip
def test_a_time_of_day_is_its_latest_occurrence_in_the_display_zone(typed: str, clock: str) -> None:
    when = parse_since(typed)
    assert when == latest(clock)
    assert pd.Timestamp.now(tz="UTC") - pd.Timedelta(days=1) <= when <= pd.Timestamp.now(tz="UTC")


def test_today_yesterday_and_a_day_with_a_time() -> None:
    assert parse_since("today") == midnight(0)
    assert parse_since("Yesterday") == midnight(1)
    assert parse_since("yesterday 21:00") == midnight(1) + pd.Timedelta(hours=21)
    assert parse_since("yesterday 9pm") == midnight(1) + pd.Timedelta(hours=21)
    assert parse_since("today 08:15") == midnight(0) + pd.Timedelta(hours=8, minutes=15)
    assert parse_since("yesterday 21:00 UTC") == pd.Timestamp.now(tz="UTC").normalize() - pd.Timedelta(hours=3)


def test_durations_and_now_count_back_from_now() -> None:
    before = pd.Timestamp.now(tz="UTC")
    assert before - pd.Timedelta("2h") <= parse_since("2h") <= pd.Timestamp.now(tz="UTC") - pd.Timedelta("2h")
    assert before <= parse_since("now") <= pd.Timestamp.now(tz="UTC")
    assert parse_since(pd.Timedelta("90s")) <= pd.Timestamp.now(tz="UTC") - pd.Timedelta("90s")


@pytest.mark.parametrize("typed", ["12/01 21:00", "year 1", "13pm", "25:00", "21:61", "tomorrow", "9 pm-ish", ""])
def test_anything_else_is_one_line_naming_the_forms(typed: str) -> None:
    with pytest.raises(opslib.OpslibError) as raised:
        parse_since(typed)
    message = str(raised.value)
    assert "\n" not in message and "is not a time" in message
    assert "'2h'" in message and "'today'" in message and "'9pm'" in message and "'yesterday 21:00'" in message


@pytest.mark.parametrize("typed", ["1969-12-31 23:00 UTC", "1900-01-01", "2999-01-01"])
def test_a_time_before_1970_or_more_than_a_day_ahead_is_refused(typed: str) -> None:
    with pytest.raises(opslib.OpslibError, match=r"before 1970 or more than a day ahead; give an ISO time"):
        parse_since(typed, "until")
    ahead = (pd.Timestamp.now(tz="UTC") + pd.Timedelta(hours=23)).strftime("%Y-%m-%dT%H:%MZ")
    assert parse_since(ahead, "until") > pd.Timestamp.now(tz="UTC")


def test_every_reader_refuses_a_bad_time_in_one_line(keys: Keys, redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    readers = (
        lambda: opslib.dead_letters(since="12/01 21:00", client=client, prefix=keys.prefix),
        lambda: opslib.throughput(since="12/01 21:00", client=client, prefix=keys.prefix),
        lambda: opslib.archive(since="12/01 21:00"),
        lambda: opslib.history(since="12/01 21:00"),
        lambda: opslib.actions(since="12/01 21:00"),
    )
    for read in readers:
        with pytest.raises(opslib.OpslibError, match=r"since='12/01 21:00' is not a time; give an ISO time"):
            read()


def test_a_time_that_names_its_zone_is_read_in_it() -> None:
    assert parse_since("2026-12-01 15:46 UTC") == pd.Timestamp("2026-12-01 15:46", tz="UTC")
    assert parse_since("2026-12-01 15:46 America/New_York") == pd.Timestamp("2026-12-01 20:46", tz="UTC")
    assert parse_since("2026-12-01T15:46+01:00") == pd.Timestamp("2026-12-01 14:46", tz="UTC")
    assert parse_since("2026-12-01T15:46Z") == pd.Timestamp("2026-12-01 15:46", tz="UTC")


def test_a_time_the_clocks_pass_twice_or_a_bad_zone_is_one_clear_error() -> None:
    with pytest.raises(opslib.OpslibError, match=r"not one instant in Europe/Prague .* add an offset"):
        parse_since("2026-10-25 02:30")
    with pytest.raises(opslib.OpslibError, match="'Europe/Prag' is not a time zone; did you mean 'Europe/Prague'"):
        parse_since("2026-12-01 15:46 Europe/Prag")
    with pytest.raises(opslib.OpslibError, match=r"until='later' is not a time; .* read in Europe/Prague"):
        parse_since("later", "until")


def seat(r: redis.Redis, keys: Keys, order_id: str, error: str, traceback: str = "Traceback ...") -> str:
    fields = {"kind": "seat_label", "job_id": f"job-{order_id}", "attempts": "1", "order_id": order_id}
    return bury(r, keys, fields, {"attempts": "2", "error": error, "traceback": traceback, "reason": "exhausted"})


def test_dead_letters_search_and_until(r: redis.Redis, keys: Keys, at: dict[str, Any]) -> None:
    first = seat(r, keys, "4471", "SeatLabelInvalid: '14-C' is not a row letter")
    second = seat(r, keys, "4472", "MailTimeout: no answer", traceback="File mailer.py, line 12, in send")
    assert opslib.dead_letters(search="4471", **at).index.tolist() == [first]
    assert opslib.dead_letters(search="seatlabelinvalid", **at).index.tolist() == [first]
    assert opslib.dead_letters(search="mailer.py", **at).index.tolist() == [second]
    assert opslib.dead_letters(search=second, **at).index.tolist() == [second]
    assert opslib.dead_letters(search="job-4472", **at).index.tolist() == [second]
    assert opslib.dead_letters(search="nothing like it", **at).empty
    died = opslib.dead_letters(**at)["dead_at"]
    typed = (died.iloc[1]).tz_convert("Europe/Prague").strftime("%Y-%m-%d %H:%M:%S.%f")
    before = died[died < died.iloc[1]].index.tolist()  # [first], or none when both died in one millisecond
    assert opslib.dead_letters(until=typed, **at).index.tolist() == before  # read as UTC: an hour later, both
