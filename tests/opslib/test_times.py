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
    today = pd.Timestamp.now(tz="Europe/Prague").strftime("%Y-%m-%d")
    assert parse_since("15:46") == pd.Timestamp(f"{today} 15:46", tz="Europe/Prague").tz_convert("UTC")


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
