"""The dead-letter panel in-process: its flow, and HTML escaping of every untrusted string."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re
from collections.abc import Iterator

import ipywidgets as w
import pandas as pd
import pytest
import redis

import opslib
from opslib.errors import OpslibError
from opslib.frames import replay_status_to_frame
from opslib.panel.filters import panel_time
from opslib.panel.html import flow_html, status_html
from opslib.panel.layout import ENTRY_ROWS
from opslib.panel.ticker import Ticker
from opslib.panel.widgets import DeadLetterPanel
from opslib.signatures import signature
from opslib.times import parse_since
from tests.opslib.helpers import bury
from worker.archive.table import migrate_url
from worker.store.enqueue import enqueue
from worker.store.keys import GROUP, Keys

SCRIPT = "<script>alert('dead')</script>"
IMG = "<img src=x onerror=alert(1)>"
TRACEBACK = f"Traceback:\n  line 1\n{SCRIPT}"
RAW = ("<script", "<img", "<b onmouseover")


def html_values(widget: w.Widget) -> Iterator[str]:
    """The HTML of every HTML widget in the panel."""
    if isinstance(widget, w.HTML):
        yield widget.value
    for child in getattr(widget, "children", ()):
        yield from html_values(child)


def test_untrusted_strings_are_escaped_wherever_they_are_html(r: redis.Redis, keys: Keys) -> None:
    evil_kind = f"render{IMG}"
    for seat in ("1-A", "2-B"):
        bury(
            r,
            keys,
            {"kind": evil_kind, "seat": seat, "note": IMG, "<b onmouseover=alert(2)>": SCRIPT},
            {"attempts": "2", "error": f"ValueError: {SCRIPT} {IMG} at {seat!r}", "traceback": SCRIPT},
        )
    panel = DeadLetterPanel(client=r, prefix=keys.prefix)
    assert panel.kind.options[1] == (evil_kind, evil_kind)  # a dropdown label is text, not HTML
    panel.kind.value = evil_kind
    assert panel.group.value == signature(f"ValueError: {SCRIPT} {IMG} at '1-A'")
    panel.replay_button.click()
    pages = list(html_values(panel.widget))
    assert "&lt;script&gt;alert(&lt;str&gt;)&lt;/script&gt;" in panel.table.value
    assert "&lt;script&gt;alert('dead')&lt;/script&gt;" in panel.preview.value
    assert "&lt;img src=x onerror=alert(1)&gt;" in panel.preview.value
    assert "&lt;b onmouseover=alert(2)&gt;" in panel.preview.value  # a payload field's name
    assert "Replay 2 dead letters</b> of render&lt;img" in panel.question.value
    panel.confirm.click()
    assert "Replayed <b>2</b> of 2" in panel.result.value
    assert "still queued: <b>2</b>" in panel.status.value
    pages += list(html_values(panel.widget))
    for page in pages:
        for raw in RAW:
            assert raw not in page, page

    outcome = {"status": "failed", "dead_id": "2-0", "error": f"ValueError: {IMG}", "at": "2026-11-30T21:00:00Z"}
    failed = replay_status_to_frame("B", {b"1-0": json.dumps(outcome)}, [], {}, [])
    assert "&lt;img src=x onerror=alert(1)&gt;" in status_html(failed)
    assert "<img" not in status_html(failed)


def test_the_panel_previews_exactly_what_it_replays(r: redis.Redis, keys: Keys) -> None:
    seat_ids = [
        bury(r, keys, {"kind": "seat_label", "seat": s}, {"attempts": "2", "error": f"SeatLabelInvalid: {s!r} is bad"})
        for s in ("1-A", "2-B", "3-C")
    ]
    bury(r, keys, {"kind": "mailer", "email": "a@b"}, {"attempts": "4", "error": "ConnectionError: 503"})
    panel = DeadLetterPanel(client=r, prefix=keys.prefix)
    assert "<b>4</b> dead letters" in panel.counts.value
    assert panel.counts.value.endswith(" · 1 consumer</p>")  # the bury script's "seeder"
    assert panel.flow.value == "<p>No flow counted in the last hour.</p>"  # no worker ran a job
    assert [label for label, _ in panel.group.options] == [
        "3 × SeatLabelInvalid: <str> is bad",
        "1 × ConnectionError: <num>",
    ]
    assert list(panel.taken.index) == seat_ids
    assert "A replay would take <b>3</b> entries (newest first):" in panel.preview.value
    panel.kind.value = "mailer"
    assert [label for label, _ in panel.group.options] == ["1 × ConnectionError: <num>"]
    assert "email" in panel.taken.columns and "seat" not in panel.taken.columns
    panel.kind.value = "seat_label"
    panel.replay_button.click()
    panel.cancel.click()
    assert r.xlen(keys.dead) == 4
    panel.replay_button.click()
    panel.confirm.click()
    assert "Replayed <b>3</b> of 3" in panel.result.value
    assert r.xlen(keys.dead) == 1
    assert "<b>1</b> dead letter · " in panel.counts.value  # reloaded after the replay
    assert panel.progress.value == 3
    assert (
        pd.Series([f[b"replay_of"].decode() for _, f in r.xrange(keys.jobs) if b"replay_of" in f]).tolist() == seat_ids
    )


def test_the_panel_discards_what_it_previews_only_with_a_reason_and_escapes_it(
    r: redis.Redis, keys: Keys, archive_url: str
) -> None:
    migrate_url(archive_url)  # the archive there: the discard is in it when the click returns
    seat_ids = [
        bury(r, keys, {"kind": "seat_label", "seat": s}, {"attempts": "2", "error": f"SeatLabelInvalid: {s!r} is bad"})
        for s in ("1-A", "2-B")
    ]
    bury(r, keys, {"kind": "mailer", "email": "a@b"}, {"attempts": "4", "error": "ConnectionError: 503"})
    panel = DeadLetterPanel(client=r, prefix=keys.prefix)
    assert list(panel.taken.index) == seat_ids and not panel.discard_button.disabled
    panel.discard_button.click()  # no reason: nothing asked, nothing taken
    assert "discard needs a reason" in panel.message.value
    assert panel.asking.layout.display == "none" and r.xlen(keys.dead) == 3
    panel.reason.value = f"refunded {SCRIPT}"
    panel.discard_button.click()
    assert "Discard 2 dead letters</b> of every kind" in panel.question.value
    assert "&lt;script&gt;" in panel.question.value and "<script" not in panel.question.value
    assert panel.confirm.description == "Confirm discard"
    panel.confirm.click()
    assert "Discarded <b>2</b> of 2" in panel.result.value
    assert [e.decode() for e, _ in r.xrange(keys.dead)] != seat_ids and r.xlen(keys.dead) == 1
    assert r.xlen(keys.jobs) == 0  # discarded, not replayed
    assert r.xlen(keys.dead_log) == 0
    rows = opslib.archive(status="discarded", client=r, prefix=keys.prefix)
    assert sorted(rows.index) == sorted(seat_ids) and set(rows["discard_reason"]) == {f"refunded {SCRIPT}"}
    assert panel.reason.value == ""


def seat_and_mail(r: redis.Redis, keys: Keys) -> tuple[list[str], str]:
    """Three seat_label dead letters (one order 4471 with a script in its traceback) and one mailer's."""
    seat_ids = [
        bury(
            r,
            keys,
            {"kind": "seat_label", "seat": seat, "order_id": order},
            {"attempts": "2", "error": f"SeatLabelInvalid: {seat!r} is bad", "traceback": TRACEBACK},
        )
        for seat, order in (("1-A", "4470"), ("2-B", "4471"), ("3-C", "4472"))
    ]
    mail_id = bury(r, keys, {"kind": "mailer", "email": "a@b"}, {"attempts": "4", "error": "ConnectionError: 503"})
    return seat_ids, mail_id


def test_the_kind_filters_the_groups_table_and_the_search_finds_payloads(r: redis.Redis, keys: Keys) -> None:
    seat_ids, mail_id = seat_and_mail(r, keys)
    panel = DeadLetterPanel(client=r, prefix=keys.prefix)
    assert "SeatLabelInvalid" in panel.table.value and "ConnectionError" in panel.table.value
    panel.kind.value = "mailer"
    assert "ConnectionError" in panel.table.value and "SeatLabelInvalid" not in panel.table.value
    panel.kind.value = ""
    panel.search.value = "4471"  # a payload field
    assert list(panel.taken.index) == [seat_ids[1]] and "ConnectionError" not in panel.table.value
    panel.search.value = "CONNECTIONERROR"  # the error, any case
    assert list(panel.taken.index) == [mail_id]
    panel.search.value = "nothing like this"
    assert "No dead letters match the filters." in panel.table.value
    assert panel.replay_button.disabled and panel.discard_button.disabled


def test_a_time_range_in_the_display_zone_keeps_the_entries_that_died_in_it(r: redis.Redis, keys: Keys) -> None:
    seat_and_mail(r, keys)
    opslib.set_display_tz("Europe/Prague")
    try:
        panel = DeadLetterPanel(client=r, prefix=keys.prefix)
        newest = panel.dead["dead_at"].max()
        panel.since.value = "1h"
        assert len(panel.shown) == 4
        panel.until.value = (newest - pd.Timedelta("1D")).tz_convert("Europe/Prague").strftime("%Y-%m-%d %H:%M")
        assert "must be after From" in panel.filter_message.value  # the range is refused, the list cleared
        assert panel.shown.empty and panel.entries.options == ()
        panel.since.value = ""
        assert panel.shown.empty and "No dead letters match" in panel.table.value
        prague = (newest - pd.Timedelta("30min")).tz_convert("Europe/Prague").strftime("%Y-%m-%d %H:%M:%S")
        panel.until.value = prague  # read in Prague's time: half an hour before the newest (as UTC, after it)
        assert panel.shown.empty
        prague = (newest + pd.Timedelta("1s")).tz_convert("Europe/Prague").strftime("%Y-%m-%d %H:%M:%S")
        panel.until.value = prague
        assert len(panel.shown) == 4 and panel.filter_message.value == ""
        panel.until.value = "soon"
        assert "To=&#x27;soon&#x27; is not a time" in panel.filter_message.value
        assert panel.entries.options == () and "the filter is not one" in panel.table.value
        panel.until.value = ""
        assert " CET · " in panel.entries.options[0][0]  # entry labels in the display zone
    finally:
        opslib.set_display_tz(None)


def test_single_rows_are_selected_read_and_replayed_or_discarded(r: redis.Redis, keys: Keys) -> None:
    seat_ids, mail_id = seat_and_mail(r, keys)
    panel = DeadLetterPanel(client=r, prefix=keys.prefix)
    assert [value for _label, value in panel.entries.options] == seat_ids[::-1]  # newest first
    assert "Select an entry" in panel.entry.value and len(panel.taken) == 3
    panel.entries.value = (seat_ids[1],)
    assert f"<b>{seat_ids[1]} · " in panel.entry.value
    assert "Traceback:\n  line 1\n&lt;script&gt;" in panel.entry.value and "<script" not in panel.entry.value
    assert "A replay would take <b>1</b> selected entry (newest first):" in panel.preview.value
    panel.replay_button.click()
    assert "Replay 1 selected dead letter</b>" in panel.question.value
    panel.confirm.click()
    assert "Replayed <b>1</b> of 1" in panel.result.value
    assert sorted(e.decode() for e, _ in r.xrange(keys.dead)) == sorted([seat_ids[0], seat_ids[2], mail_id])
    panel.entries.value = (seat_ids[2],)
    panel.reason.value = "order 4472 refunded"
    panel.discard_button.click()
    assert "Discard 1 selected dead letter</b>" in panel.question.value
    panel.confirm.click()
    assert "Discarded <b>1</b> of 1" in panel.result.value
    assert sorted(e.decode() for e, _ in r.xrange(keys.dead)) == sorted([seat_ids[0], mail_id])
    assert [value for _label, value in panel.entries.options] == [seat_ids[0]]


def test_a_typed_time_without_an_offset_is_read_in_the_display_zone() -> None:
    opslib.set_display_tz("Europe/Prague")
    try:
        assert panel_time("2026-11-30 21:00", "From") == pd.Timestamp("2026-11-30 20:00", tz="UTC")
        assert panel_time("2026-11-30T21:00+00:00", "From") == pd.Timestamp("2026-11-30 21:00", tz="UTC")
        assert panel_time("  ", "To") is None
        assert panel_time("yesterday 21:00", "From") == parse_since("yesterday 21:00")  # the grammar
        with pytest.raises(opslib.OpslibError, match=r"From=.tomorrow. is not a time; .*, read in Europe/Prague"):
            panel_time("tomorrow", "From")
    finally:
        opslib.set_display_tz(None)


def preview_ids(panel: DeadLetterPanel) -> list[str]:
    """The dead ids of the preview table, top to bottom."""
    return re.findall(r"<td>(\d{13}-\d+)</td>", panel.preview.value)


def test_the_list_the_preview_and_the_csv_share_one_order_newest_first(r: redis.Redis, keys: Keys) -> None:
    seat_ids, _mail_id = seat_and_mail(r, keys)
    panel = DeadLetterPanel(client=r, prefix=keys.prefix)
    listed = [value for _label, value in panel.entries.options]
    assert listed == seat_ids[::-1] == preview_ids(panel)
    panel.entries.value = (seat_ids[0], seat_ids[2])
    assert preview_ids(panel) == [seat_ids[2], seat_ids[0]]
    panel.csv_button.click()
    link = panel.csv.value
    assert 'download="dead-letters-all-kinds-' in link and "Save dead-letters-all-kinds-" in link
    assert "(2 entries)</a>" in link
    data = base64.b64decode(re.search(r"base64,([A-Za-z0-9+/=]+)", link).group(1)).decode()  # type: ignore[union-attr]
    saved = pd.read_csv(io.StringIO(data), dtype=str)
    assert saved["dead_id"].tolist() == [seat_ids[2], seat_ids[0]] and saved["order_id"].tolist() == ["4472", "4470"]
    assert saved["traceback"].tolist() == [TRACEBACK, TRACEBACK]  # every column whole, line breaks kept
    panel.entries.value = (seat_ids[1],)
    assert panel.csv.value == ""  # the link was of the former selection


def test_a_group_beyond_one_page_is_paged_newest_first(r: redis.Redis, keys: Keys) -> None:
    pipe = r.pipeline()
    for n in range(ENTRY_ROWS + 30):
        pipe.xadd(keys.dead, {"kind": "sms", "attempts": "3", "reason": "exhausted", "error": f"Timeout: {n} s"})
    ids = [i.decode() for i in pipe.execute()]
    panel = DeadLetterPanel(client=r, prefix=keys.prefix)
    assert len(panel.entries.options) == ENTRY_ROWS and panel.entries.options[0][1] == ids[-1]
    assert f"entries 1–{ENTRY_ROWS} of {ENTRY_ROWS + 30}, newest first" in panel.page.value
    assert panel.newer.disabled and not panel.older.disabled
    panel.older.click()
    assert [value for _label, value in panel.entries.options] == ids[:30][::-1]
    assert f"entries {ENTRY_ROWS + 1}–{ENTRY_ROWS + 30} of {ENTRY_ROWS + 30}" in panel.page.value
    assert panel.older.disabled and not panel.newer.disabled
    panel.entries.value = (ids[0],)  # the oldest entry of all, beyond the first page
    assert "<b>1</b> selected entry" in panel.preview.value
    panel.load()  # a reload (by hand or by the Auto-refresh) keeps the page and the selection
    assert panel.entries.value == (ids[0],) and "<b>1</b> selected entry" in panel.preview.value
    panel.newer.click()
    assert panel.entries.options[0][1] == ids[-1] and panel.entries.value == ()
    assert f"A replay would take <b>{ENTRY_ROWS + 30}</b> entries" in panel.preview.value


def test_auto_refresh_reads_the_queue_again_until_switched_off(r: redis.Redis, keys: Keys) -> None:
    seat_and_mail(r, keys)
    panel = DeadLetterPanel(client=r, prefix=keys.prefix)
    panel.ticker.every_s = 0.05
    panel.auto.value = True  # outside a kernel's loop: one clear line, the toggle back off
    assert "needs a running kernel" in panel.message.value and panel.auto.value is False

    async def toggled_in_a_kernel() -> None:
        panel.auto.value = True
        assert panel.ticker.running
        bury(r, keys, {"kind": "mailer", "email": "c@d"}, {"attempts": "4", "error": "ConnectionError: 504"})
        deadline = asyncio.get_running_loop().time() + 10
        while "<b>5</b> dead letters" not in panel.counts.value:
            assert asyncio.get_running_loop().time() < deadline, panel.counts.value
            await asyncio.sleep(0.02)
        panel.auto.value = False
        assert not panel.ticker.running

    asyncio.run(toggled_in_a_kernel())


def test_a_question_waiting_for_an_answer_holds_the_auto_refresh(r: redis.Redis, keys: Keys) -> None:
    seat_and_mail(r, keys)
    panel = DeadLetterPanel(client=r, prefix=keys.prefix)
    panel.replay_button.click()
    bury(r, keys, {"kind": "mailer", "email": "c@d"}, {"attempts": "4", "error": "ConnectionError: 504"})
    panel._tick()
    assert "<b>4</b> dead letters" in panel.counts.value and "Replay 3 dead letters" in panel.question.value
    panel.cancel.click()
    panel._tick()
    assert "<b>5</b> dead letters" in panel.counts.value


def test_a_ticker_keeps_its_clock_when_a_tick_raises() -> None:
    ticks: list[int] = []

    def tick() -> None:
        ticks.append(1)
        raise OpslibError("the server went away")

    async def run() -> None:
        ticker = Ticker(0.01, tick)
        ticker.start()
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, _context: None)  # the raised tick, reported by the loop
        deadline = loop.time() + 10
        while len(ticks) < 3:
            assert loop.time() < deadline
            await asyncio.sleep(0.01)
        ticker.stop()

    asyncio.run(run())


def test_the_header_draws_the_last_hours_flow_as_a_sparkline_of_numbers_only() -> None:
    per_minute = pd.DataFrame({"succeeded": [0, 4, 8, 2], "dead": [0, 0, 2, 0]})
    page = flow_html(per_minute)
    assert '<svg width="180" height="26"' in page and page.count("<polyline") == 2
    succeeded = re.search(r'stroke="#27ae60" stroke-width="1.5" points="([^"]+)"', page).group(1)  # type: ignore[union-attr]
    heights = [float(point.split(",")[1]) for point in succeeded.split()]
    assert heights[2] == 1.0 and heights[0] == 25.0  # the busiest minute at the top, an idle one at the bottom
    assert "14 succeeded</span> · <span" in page and "2 died" in page
    assert "at most 8 a minute" in page
    assert flow_html(per_minute.iloc[0:0]) == "<p>No flow counted in the last hour.</p>"


def test_the_panel_pauses_and_resumes_a_kind_with_a_reason_and_escapes_it(r: redis.Redis, keys: Keys) -> None:
    bury(r, keys, {"kind": "seat_label", "seat": "1-A"}, {"attempts": "2", "error": "SeatLabelInvalid: '1-A' is bad"})
    panel = DeadLetterPanel(client=r, prefix=keys.prefix)
    control = panel.pause_control
    assert control.box in panel.widget.children and "no kind is paused" in control.state.value
    control.kind.value = "seat_label"
    control.pause_button.click()  # no reason: refused, nothing paused
    assert "pause needs a reason" in control.message.value and not r.exists(keys.paused)
    control.reason.value = f"seat map fix {SCRIPT}"
    control.pause_button.click()
    assert "<b>seat_label</b> paused since " in control.state.value
    assert " UTC by " in control.state.value  # since when, in the display zone
    assert "&lt;script&gt;" in control.state.value and "<script" not in control.state.value
    assert bool(opslib.kinds(client=r, prefix=keys.prefix).loc["seat_label", "paused"])
    control.resume_button.click()
    assert "resumed: 0 waiting jobs" in control.message.value and "no kind is paused" in control.state.value
    assert list(opslib.actions(kind="seat_label", client=r, prefix=keys.prefix)["action"]) == ["pause", "resume"]


def test_a_dead_letter_that_failed_again_after_a_replay_carries_a_badge_with_its_replay_count(
    r: redis.Redis, keys: Keys
) -> None:
    first = bury(r, keys, {"kind": "seat_label", "seat": "1-A"}, {"attempts": "2", "error": "SeatLabelInvalid: bad"})
    again = bury(
        r,
        keys,
        {"kind": "seat_label", "seat": "1-A", "replay_of": first, "replays": "1"},
        {"attempts": "2", "error": "SeatLabelInvalid: bad"},
    )
    thrice = bury(
        r,
        keys,
        {"kind": "seat_label", "seat": "1-A", "replay_of": again, "replays": "3"},
        {"attempts": "2", "error": "SeatLabelInvalid: bad"},
    )
    panel = DeadLetterPanel(client=r, prefix=keys.prefix)
    labels = dict((value, label) for label, value in panel.entries.options)
    assert labels[again].startswith(f"{again} · ↻ 1 replay · ") and labels[thrice].startswith(
        f"{thrice} · ↻ 3 replays · "
    )
    assert "↻" not in labels[first]
    panel.entries.value = (thrice,)
    assert ">↻ 3 replays</span> failed again; it came from " + again in panel.entry.value
    assert "<td>3</td>" in panel.preview.value  # the preview's replays column


def test_the_selected_entry_links_to_its_trace_from_opslib_trace_url(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    failed = {"attempts": "1", "error": "ValueError: no seat", "reason": "exhausted"}
    traced = bury(r, keys, {"kind": "render_tickets", "traceparent": f"00-{trace_id}-b7ad6b7169203331-01"}, failed)
    untraced = bury(r, keys, {"kind": "render_tickets", "traceparent": f"00-{SCRIPT}-b7ad6b7169203331-01"}, failed)
    monkeypatch.setenv("OPSLIB_TRACE_URL", "https://tempo.example/trace/{trace_id}?a=1&b=<2>")
    panel = DeadLetterPanel(client=r, prefix=keys.prefix)
    panel.entries.value = (traced,)
    href = f"https://tempo.example/trace/{trace_id}?a=1&amp;b=&lt;2&gt;"
    assert f'Trace <a href="{href}" target="_blank" rel="noopener noreferrer">{trace_id}</a>' in panel.entry.value
    panel.entries.value = (untraced,)  # a malformed traceparent: no trace, nothing of it rendered
    assert "Trace <" not in panel.entry.value and "<script" not in panel.entry.value


def test_the_panel_cancels_a_running_job_with_a_reason(r: redis.Redis, keys: Keys) -> None:
    entry = enqueue(r, "render_tickets", {"order_id": "4471"}, prefix=keys.prefix)
    job_id = r.xrange(keys.jobs, entry, entry)[0][1][b"job_id"].decode()
    r.xgroup_create(keys.jobs, GROUP, id="0")
    r.xreadgroup(GROUP, "render-1", {keys.jobs: ">"}, count=1)  # a worker runs it
    panel = DeadLetterPanel(client=r, prefix=keys.prefix)
    control = panel.cancel_control
    assert control.box in panel.widget.children
    control.load()
    assert control.job.options == ((f"render_tickets {job_id} on render-1", job_id),)
    control.cancel_button.click()  # no reason: refused, nothing marked
    assert "cancel needs a reason" in control.message.value and not r.exists(keys.cancels)
    control.reason.value = f"wrong seats {SCRIPT}"
    control.cancel_button.click()
    assert control.message.value == f"render_tickets {job_id}: cancelled"
    assert json.loads(r.hget(keys.cancels, job_id))["reason"] == f"wrong seats {SCRIPT}"
    assert list(opslib.actions(client=r, prefix=keys.prefix)["action"]) == ["cancel"]
