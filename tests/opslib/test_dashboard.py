"""The dashboard in-process: views in the URL, a tab per state with counts that follow its filters, the actions
that fit each state, a bad filter that clears the list, the warning of a replay into a paused kind, the flow charts,
and escaping."""

from __future__ import annotations

import pandas as pd
import pytest
import redis

import opslib
from opslib.panel.dashboard import Dashboard
from opslib.panel.filters import Filters
from opslib.panel.flow_chart import flow_charts_html
from opslib.panel.job_tab import JobTab
from opslib.panel.state_reads import filter_listing, listing
from opslib.panel.tab_actions import TabSpec
from opslib.panel.view_state import ViewState, parse_view, view_query
from tests.helpers import Workers, wait_for
from tests.incident.helpers import KINDS as INCIDENT_KINDS
from tests.incident.helpers import enqueue_jobs, parked_job_ids
from tests.opslib.helpers import bury
from tests.opslib.helpers_archive import archive_dead_stream
from tests.opslib.test_widgets import IMG, RAW, SCRIPT, html_values
from worker.store.enqueue import enqueue
from worker.store.keys import GROUP, Keys


def test_a_view_is_written_as_a_query_string_and_read_back_without_the_token() -> None:
    view = ViewState(tab="waiting", kind="send_email", search="44 71&x", since="2h", selected=("1-0", "2-0"))
    query = view_query(view)
    assert query == "tab=waiting&kind=send_email&q=44+71%26x&from=2h&sel=1-0%2C2-0"
    assert parse_view(query) == (view, [])
    assert parse_view(f"?token=secret&{query}") == (view, [])  # Voilà's token is neither read nor written
    assert view_query(ViewState()) == "tab=dead"
    assert parse_view("") == (ViewState(), [])
    opened, problems = parse_view("tab=graveyard&window=3y&kind=x")
    assert opened == ViewState(kind="x")
    assert problems == [
        "tab='graveyard' in the link is not a tab; use one of waiting, running, delayed, dead, archived, flow",
        "window='3y' in the link is not a window; use one of 1h, 6h, 24h, 7d",
    ]


def waiting_jobs(r: redis.Redis, keys: Keys) -> list[str]:
    """Three jobs nobody has read (two send_email, one render_tickets); a consumer group without readers."""
    r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
    return [
        enqueue(r, kind, {"order_id": order}, prefix=keys.prefix)
        for kind, order in (("send_email", "4471"), ("send_email", "4472"), ("render_tickets", "4471"))
    ]


def test_a_link_opens_the_waiting_tab_filtered_and_selected_and_its_count_follows(r: redis.Redis, keys: Keys) -> None:
    ids = waiting_jobs(r, keys)
    board = Dashboard(r, keys.prefix, query=f"tab=waiting&kind=send_email&sel={ids[1]}")
    tab = board.jobs["waiting"]
    assert board.tab == "waiting" and board.tabs.titles[0] == "Waiting 3"
    assert list(tab.shown.index) == ids[:2] and tab.jobs.value == (ids[1],)
    assert "<b>2</b> of 3 waiting jobs match the filters" in tab.count.value
    tab.search.value = "4472"
    assert list(tab.shown.index) == [ids[1]] and "<b>1</b> of 3" in tab.count.value
    assert view_query(board.view()) == f"tab=waiting&kind=send_email&q=4472&sel={ids[1]}"
    assert f'href="?tab=waiting&amp;kind=send_email&amp;q=4472&amp;sel={ids[1]}"' in board.link.value
    tab.kind.value = ""
    tab.search.value = ""
    tab.since.value = "9 o'clock"  # not a time: the list is cleared and the line says why
    assert tab.jobs.options == () and tab.shown.empty
    assert "From=&quot;9 o&#x27;clock&quot; is not a time" in tab.message.value
    assert "the filter is not one" in tab.count.value


def test_waiting_jobs_are_cancelled_with_a_reason(r: redis.Redis, keys: Keys) -> None:
    ids = waiting_jobs(r, keys)
    board = Dashboard(r, keys.prefix, query="tab=waiting")
    tab = board.jobs["waiting"]
    tab.jobs.value = (ids[0],)
    tab.buttons[0].click()  # no reason: refused before anything is asked
    assert "cancel needs a reason" in tab.message.value and tab.asking.layout.display == "none"
    tab.reason.value = "order refunded, INC-2211"
    tab.buttons[0].click()
    assert "<b>Cancel jobs: 1 waiting job</b>, because: <i>order refunded, INC-2211</i>?" in tab.question.value
    tab.confirm.click()
    assert "removed: <b>1</b>" in tab.result.value
    assert list(tab.rows.index) == ids[1:] and r.xlen(keys.jobs) == 2
    assert list(opslib.actions(client=r, prefix=keys.prefix)["action"]) == ["cancel"]


def test_delayed_jobs_run_now_and_a_run_into_a_paused_kind_warns(r: redis.Redis, keys: Keys) -> None:
    enqueue(r, "send_email", {"order_id": "4471"}, delay_s=3600, prefix=keys.prefix)
    enqueue(r, "render_tickets", {"order_id": "4472"}, delay_s=7200, prefix=keys.prefix)
    opslib.pause("send_email", reason="mail provider down, INC-2230", client=r, prefix=keys.prefix)
    board = Dashboard(r, keys.prefix, query="tab=delayed")
    tab = board.jobs["delayed"]
    assert list(tab.shown["kind"]) == ["send_email", "render_tickets"]  # soonest first
    assert "runs at " in tab.jobs.options[0][0] and "order_id=4471" in tab.jobs.options[0][0]
    tab.jobs.value = (tab.shown.index[0],)
    tab.buttons[0].click()  # Run now
    assert "⚠ <b>send_email</b> is paused: these jobs will wait (parked) until resumed." in tab.question.value
    tab.confirm.click()
    assert "Done: queued: <b>1</b> · batch <code>" in tab.result.value
    assert list(tab.rows["kind"]) == ["render_tickets"]
    tab.jobs.value = (tab.shown.index[0],)
    tab.buttons[1].click()  # Cancel delayed, no reason
    assert "needs a reason" in tab.message.value


def test_the_dead_tab_warns_of_a_replay_into_a_paused_kind_and_clears_its_list_on_a_bad_filter(
    r: redis.Redis, keys: Keys
) -> None:
    bury(r, keys, {"kind": "seat_label", "seat": "1-A"}, {"attempts": "2", "error": "SeatLabelInvalid: '1-A'"})
    opslib.pause("seat_label", reason="seat map fix, INC-2214", client=r, prefix=keys.prefix)
    board = Dashboard(r, keys.prefix, query="tab=dead&kind=seat_label")
    panel = board.dead
    assert board.tab == "dead" and board.tabs.titles[3] == "Dead 1" and len(panel.taken) == 1
    panel.replay_button.click()
    assert "⚠ <b>seat_label</b> is paused" in panel.question.value
    panel.until.value = "last tuesday-ish"
    assert panel.entries.options == () and panel.group.options == () and panel.taken.empty
    assert "is not a time" in panel.filter_message.value
    assert panel.table.value == "<p>No dead letters shown: the filter is not one.</p>"


def test_the_running_and_archived_tabs_list_their_jobs(r: redis.Redis, keys: Keys, archive_url: str) -> None:
    dead_id = bury(r, keys, {"kind": "seat_label", "seat": "1-A"}, {"attempts": "2", "error": "SeatLabelInvalid"})
    archive_dead_stream(r, keys, archive_url)
    entry = enqueue(r, "render_tickets", {"order_id": "4471"}, prefix=keys.prefix)
    r.xreadgroup(GROUP, "render-1", {keys.jobs: ">"}, count=1)
    board = Dashboard(r, keys.prefix, query="tab=running")
    assert list(board.jobs["running"].shown.index) == [entry]
    assert "on render-1, idle " in board.jobs["running"].jobs.options[0][0]
    board.tabs.selected_index = 4  # archived: read when shown
    archived = board.jobs["archived"]
    assert list(archived.shown.index) == [dead_id] and archived.shown["detail"].iloc[0].startswith("dead · ")
    assert view_query(board.view()) == "tab=archived"


def test_untrusted_text_is_escaped_in_every_tab(r: redis.Redis, keys: Keys) -> None:
    r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
    enqueue(r, f"mail{IMG}", {"note": SCRIPT}, prefix=keys.prefix)
    board = Dashboard(r, keys.prefix, query=f"tab=waiting&q={SCRIPT}")
    tab = board.jobs["waiting"]
    assert len(tab.shown) == 1 and tab.kind.options[1] == (f"mail{IMG}", f"mail{IMG}")
    tab.jobs.value = tuple(tab.shown.index)
    tab.reason.value = SCRIPT
    tab.buttons[0].click()
    for page in html_values(board.widget):
        for raw in RAW:
            assert raw not in page, page


def test_the_flow_charts_one_per_kind_and_queue_the_busiest_first() -> None:
    periods = pd.date_range("2026-12-02 04:00", periods=3, freq="1min", tz="UTC")
    flow = pd.DataFrame(
        {
            "period": list(periods) * 2,
            "kind": ["send_email"] * 3 + [f"render{IMG}"] * 3,
            "queue": ["default"] * 3 + ["bulk"] * 3,
            "succeeded": [1, 0, 0, 5, 9, 4],
            "retried": [0, 2, 0, 0, 0, 0],
            "dead": [0, 0, 1, 0, 0, 0],
        }
    )
    page = flow_charts_html(flow, "1h")
    assert page.index("bulk / render&lt;img") < page.index("default / send_email")
    assert "18 succeeded · 0 retried · 0 dead" in page and "1 succeeded · 2 retried · 1 dead" in page
    assert page.count("<svg") == 2 and page.count("<polyline") == 4 and "<img" not in page  # 0 is the baseline
    assert "(top of the chart: 9 a period)" in page
    assert "dashed line" in page
    assert "queue" not in flow_charts_html(flow.drop(columns="queue"), "1h").split("<table")[1]
    assert flow_charts_html(flow.iloc[0:0], "6h") == "<p>No flow counted in the last 6h.</p>"


def test_a_link_opens_the_dead_tab_on_a_group_with_an_entry_selected(r: redis.Redis, keys: Keys) -> None:
    seat = [
        bury(r, keys, {"kind": "seat_label", "seat": s}, {"attempts": "2", "error": f"SeatLabelInvalid: {s!r}"})
        for s in ("1-A", "2-B")
    ]
    bury(r, keys, {"kind": "mailer", "email": "a@b"}, {"attempts": "4", "error": "ConnectionError: 503"})
    group = "SeatLabelInvalid: <str>"
    board = Dashboard(r, keys.prefix, query=view_query(ViewState(kind="seat_label", group=group, selected=(seat[1],))))
    panel = board.dead
    assert panel.kind.value == "seat_label" and panel.group.value == group
    assert panel.entries.value == (seat[1],) and list(panel.taken.index) == [seat[1]]
    assert view_query(board.view()) == view_query(ViewState(kind="seat_label", group=group, selected=(seat[1],)))
    board.tabs.selected_index = 5  # flow: the view follows the tab
    assert view_query(board.view()) == "tab=flow"
    assert board.flow.charts.value == "<p>No flow counted in the last 1h.</p>"


def test_the_kind_control_throttles_and_lifts_with_a_reason(r: redis.Redis, keys: Keys) -> None:
    bury(r, keys, {"kind": "seat_label", "seat": "1-A"}, {"attempts": "2", "error": "SeatLabelInvalid"})
    control = Dashboard(r, keys.prefix).kind_control
    control.kind.value = "seat_label"
    control.rate.value = "ten"
    control.throttle_button.click()
    assert "Rate &#x27;ten&#x27; is not a number" in control.message.value
    control.rate.value = "10"
    control.throttle_button.click()  # no reason: refused
    assert "throttle needs a reason" in control.message.value
    control.reason.value = "provider asks for 10/s, INC-2215"
    control.throttle_button.click()
    assert control.message.value == "seat_label: at most 10/s"
    assert "throttled: <b>seat_label</b> at most 10/s" in control.state.value
    control.throttle_button.click()  # an empty rate lifts it
    assert control.message.value == "seat_label: no longer throttled" and "throttled" not in control.state.value
    assert list(opslib.actions(client=r, prefix=keys.prefix)["action"]) == ["throttle", "throttle"]


def test_under_voila_the_address_bar_follows_the_view(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    waiting_jobs(r, keys)
    board = Dashboard(r, keys.prefix, query="tab=waiting")
    assert board.script.outputs == ()  # not under Voilà: JupyterLab's address is left alone
    monkeypatch.setenv("SERVER_SOFTWARE", "voila/0.5.13")
    board.jobs["waiting"].kind.value = "send_email"
    [shown] = board.script.outputs
    script = shown["data"]["application/javascript"]
    assert script == "window.history.replaceState(null, '', '?' + \"tab=waiting&kind=send_email\");"


def test_jobs_parked_by_a_pause_are_waiting_and_can_be_cancelled(r: redis.Redis, workers: Workers, prefix: str) -> None:
    at = {"client": r, "prefix": prefix}
    proc = workers.start(INCIDENT_KINDS)
    wait_for(lambda: "alpha" in opslib.kinds(**at).index, 10, "the worker to declare alpha")
    opslib.pause("alpha", reason="seat map fix, INC-2214", **at)
    wait_for(lambda: "Kind alpha is paused" in workers.log(proc), 10, "the worker to see the pause")
    enqueue_jobs(r, prefix, "alpha", 3)
    wait_for(lambda: opslib.kinds(**at).loc["alpha", "parked"] == 3, 10, "the alpha jobs parked")
    board = Dashboard(r, prefix, query="tab=waiting")
    tab = board.jobs["waiting"]
    assert list(tab.shown.index) == ["alpha-0", "alpha-1", "alpha-2"]  # their job ids, in their order
    assert board.tabs.titles[0] == "Waiting 3"
    assert all(detail.startswith("parked: its kind is paused · ") for detail in tab.shown["detail"])
    tab.jobs.value = ("alpha-1",)
    tab.reason.value = "order refunded, INC-2211"
    tab.buttons[0].click()
    tab.confirm.click()
    assert "removed: <b>1</b>" in tab.result.value and list(tab.shown.index) == ["alpha-0", "alpha-2"]
    assert parked_job_ids(r, prefix, "alpha") == ["alpha-0", "alpha-2"]


def test_a_queue_column_brings_a_queue_filter_that_the_view_carries() -> None:
    def read(**_at: object) -> pd.DataFrame:
        columns = {
            "at": list(pd.to_datetime(["2026-12-02 04:00", "2026-12-02 04:01"], utc=True)),
            "kind": ["send_email", "send_email"],
            "job_id": ["a", "b"],
            "detail": ["order_id=1", "order_id=2"],
            "queue": ["default", "bulk"],
        }
        return listing(["1-0", "2-0"], columns)

    tab = JobTab(TabSpec("waiting", "waiting job", read, (), "enqueued"), {}, lambda: None)
    tab.load()
    assert tab.queue.layout.display == "flex" and [v for _l, v in tab.queue.options] == ["", "bulk", "default"]
    tab.show_view(ViewState(tab="waiting", queue="bulk"))
    assert list(tab.shown.index) == ["2-0"] and tab.view()["queue"] == "bulk"
    tab.queue.value = ""
    tab.until.value = "2026-12-02 04:01"
    assert list(tab.shown.index) == ["1-0"] and "<b>1</b> of 2 waiting jobs match" in tab.count.value
    assert filter_listing(read(), Filters(search="ORDER_ID=2"), queue="").index.tolist() == ["2-0"]


def test_an_archive_that_is_off_is_one_line_on_the_archived_tab(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARCHIVE_URL", "off")
    board = Dashboard(r, keys.prefix, query="tab=archived")
    tab = board.jobs["archived"]
    assert tab.shown.empty and "the dead-letter archive is off (ARCHIVE_URL=off)" in tab.message.value
    tab.search.value = "anything"  # the line stays while the filters change
    assert "archive" in tab.message.value and "<b>0</b> of 0 archived entries" in tab.count.value
