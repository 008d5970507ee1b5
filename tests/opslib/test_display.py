"""What a person sees of opslib's frames: times in the display zone, cut text, whole signatures; data unchanged."""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
import pytest

import opslib
from opslib.display import display_tz, duration, frame_html, frame_text, readable
from opslib.frames import dead_to_frame

TRACEBACK = "Traceback (most recent call last):\n" + "".join(f'  File "r.py", line {n}, in f\n' for n in range(9))
ENTRIES = [
    (
        "1764537240000-0",
        {
            "kind": "render_tickets",
            "error": "SeatLabelInvalid: '14-C' is not a row letter and a seat number " + "z" * 200,
            "traceback": TRACEBACK + "SeatLabelInvalid: '14-C'",
            "note": "<script>alert(1)</script>" + "n" * 300,
        },
    )
]


@pytest.fixture(autouse=True)
def utc_by_default(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("OPSLIB_TZ", raising=False)
    yield
    monkeypatch.delenv("OPSLIB_TZ", raising=False)
    opslib.set_display_tz(None)


def test_times_show_in_the_chosen_zone_while_the_data_stays_utc(monkeypatch: pytest.MonkeyPatch) -> None:
    dead = dead_to_frame(ENTRIES)
    assert display_tz() == "UTC"
    assert readable(dead)["dead_at"].iloc[0] == "2025-11-30 21:14:00 UTC"
    monkeypatch.setenv("OPSLIB_TZ", "America/New_York")
    assert readable(dead)["dead_at"].iloc[0] == "2025-11-30 16:14:00 EST"
    assert opslib.set_display_tz("Europe/Prague") == "Europe/Prague"
    assert readable(dead)["dead_at"].iloc[0] == "2025-11-30 22:14:00 CET"
    assert "times in Europe/Prague" in frame_html(dead) and "(times in Europe/Prague)" in frame_text(dead)
    assert str(dead["dead_at"].dtype) == "datetime64[ns, UTC]" and dead["dead_at"].iloc[0].hour == 21


def test_a_bad_zone_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(opslib.OpslibError, match=r"'Europe/Prag' is not a time zone; did you mean 'Europe/Prague'\?"):
        opslib.set_display_tz("Europe/Prag")
    monkeypatch.setenv("OPSLIB_TZ", "Mars/Base")
    with pytest.raises(opslib.OpslibError, match="OPSLIB_TZ='Mars/Base' is not a known time zone"):
        display_tz()


def test_wide_text_is_cut_for_display_but_signatures_never_and_tracebacks_keep_line_breaks() -> None:
    dead = dead_to_frame(ENTRIES)
    shown = readable(dead)
    assert len(shown["error"].iloc[0]) == 120 and shown["error"].iloc[0].endswith("…")
    assert shown["signature"].iloc[0] == dead["signature"].iloc[0] and len(dead["signature"].iloc[0]) > 120
    assert shown["traceback"].iloc[0].split("\n") == [
        "…",
        *[f'  File "r.py", line {n}, in f' for n in range(4, 9)],
        "SeatLabelInvalid: '14-C'",
    ]
    page = frame_html(dead)
    assert "white-space:pre-wrap" in page and "&lt;script&gt;" in page and "<script>" not in page
    assert dead["error"].iloc[0].endswith("z" * 200)  # the frame keeps its data


def test_durations_read_as_people_say_them() -> None:
    assert [duration(pd.Timedelta(seconds=s)) for s in (0.85, 1.23, 184, 7500, 273_600)] == [
        "850 ms",
        "1.2 s",
        "3 min 4 s",
        "2 h 5 min",
        "3 d 4 h",
    ]


def test_opslib_frames_are_marked_for_jupyter_and_the_mark_survives_a_filter() -> None:
    dead = dead_to_frame(ENTRIES)
    assert dead[dead["kind"] == "render_tickets"].head().attrs["opslib"] is True
    assert not pd.DataFrame({"a": [1]}).attrs


def test_a_table_grouped_by_hour_shows_its_hours_in_the_display_zone_once_marked() -> None:
    dead = dead_to_frame(ENTRIES)
    by_hour = dead.groupby(["kind", dead["dead_at"].dt.floor("h")]).size().rename("dead letters").to_frame()
    assert by_hour.attrs == {}  # a grouped table is not opslib's: pandas renders it, raw UTC timestamps and all
    opslib.set_display_tz("Europe/Prague")
    text = frame_text(opslib.display.mark(by_hour))
    assert "2025-11-30 22:00:00 CET" in text and "+00:00" not in text and text.endswith("(times in Europe/Prague)")
    assert "2025-11-30 22:00:00 CET" in frame_html(by_hour)
    assert by_hour.index.get_level_values("dead_at")[0] == pd.Timestamp("2025-11-30 21:00", tz="UTC")


def test_counts_read_in_the_singular_for_one() -> None:
    from opslib.display import plural

    assert [plural(n, "dead letter") for n in (0, 1, 2)] == ["0 dead letters", "1 dead letter", "2 dead letters"]
    assert plural(1, "entry", "entries") == "1 entry" and plural(1200, "entry", "entries") == "1,200 entries"
