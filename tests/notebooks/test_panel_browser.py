"""The dashboard in a real browser, on the demo night (with one send_email dead letter with HTML in it,
and 230 send_sms ones: more than a page).

Voilà serves ``notebooks/dead_letter_panel.ipynb`` on 127.0.0.1 (times in
Europe/Prague); Debian's headless Chromium, driven by Playwright, opens each
tab of the dashboard (waiting with a bad filter that clears its list, running,
delayed with a cancel refused for want of a reason, archived filtered by kind,
flow over 6 h), checks that the page's address and its "Link to this view"
follow the view and carry no token, opens an archived view from its URL in a
new page, then on the dead tab uses every control of the dead-letter panel
once: the header's sparkline of the last hour's flow, Pause and
Resume, Auto-refresh (a dead letter added meanwhile shows up), the kind
selector (the groups table follows), the search, the time range, the pages of
a long group (Older, Newer), the CSV link (its file read back), the send_email
entry's replay badge, the barcode group with one entry selected (its traceback
read; the list and the preview in one order; Confirm on the same screen as the
list), that entry discarded with a reason, then the rest of the group
replayed, and reads the results and the status on the page. Every request that
is not to loopback is aborted (Voilà's page asks CDNs for fonts). The page
with the barcode entry selected is saved as ``test-artifacts/panel.png`` and
the flow tab as ``test-artifacts/dashboard.png``, and with
``UPDATE_SCREENSHOTS=1`` as ``docs/images/panel.png`` and
``docs/images/dashboard.png`` (what docs/opslib.md shows) and as the panel notebook's stored picture (for readers
without a kernel: GitHub, nbviewer, an HTML export); on failure, a screenshot
and the worker's log go to ``test-artifacts/``.

``make test`` installs Chromium where it can (root and apt-get); elsewhere
this test skips and says why, except under ``CI=true``, where it must run.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import psycopg
import pytest
import redis

from tests.helpers import ROOT
from tests.notebooks.helpers import NightStack
from tests.notebooks.refresh_outputs import MACHINE_PATHS, PANEL, store_panel_picture
from worker.embedded.servers import free_port
from worker.store.keys import Keys

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

CHROMIUM = Path("/usr/bin/chromium")
#: A request the test makes from the page to a host that is not loopback: the guard must abort it.
OUTSIDE = "http://example.com/probe"
ARTIFACTS = ROOT / "test-artifacts"
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost",
]


@pytest.fixture
def chromium() -> Path:
    """Debian's Chromium; a skip saying why when it is missing (a failure under CI=true)."""
    if CHROMIUM.exists():
        return CHROMIUM
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and {CHROMIUM} is missing: `make test` installs Debian's chromium with apt-get as root")
    pytest.skip(f"{CHROMIUM} is missing: `make test` installs Debian's chromium when it runs as root with apt-get")


def is_loopback(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("data", "blob", "about") or (parts.hostname or "") in LOOPBACK_HOSTS


@pytest.fixture
def night(redis_url: str, database_url: str, tmp_path: Path) -> Iterator[NightStack]:
    stack = NightStack(redis_url, database_url, tmp_path / "worker.log")
    add_other_kind(stack)
    yield stack
    stack.stop()


@pytest.fixture
def voila(night: NightStack, tmp_path: Path) -> Iterator[str]:
    """Voilà serving the panel notebook against the night; yields the page's URL."""
    port, token = free_port(), uuid.uuid4().hex
    home = tmp_path / "jupyter"
    env = {
        **os.environ,
        **night.env(),
        "OPSLIB_TZ": "Europe/Prague",
        "PYTHONPATH": str(ROOT),
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_DATA_DIR": str(home / "data"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "XDG_CONFIG_HOME": str(home / "xdg-config"),
        "XDG_CACHE_HOME": str(home / "xdg-cache"),
        "XDG_RUNTIME_DIR": str(home / "xdg-runtime"),
        "IPYTHONDIR": str(home / "ipython"),
        "MPLCONFIGDIR": str(home / "matplotlib"),
    }
    log = tmp_path / "voila.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "voila", str(PANEL), "--no-browser", f"--port={port}",
                "--Voila.ip=127.0.0.1", f"--token={token}",
            ],
            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}/?token={token}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"voila exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"voila did not answer within 60 s:\n{log.read_text(errors='replace')[-3000:]}")
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


EVIL = "<img src=x onerror=alert(1)>"
MAIL_TRACEBACK = f"""Traceback (most recent call last):
  File "stagedoor/mail.py", line 57, in send_email
    await smtp.send_message(message)
  File "aiosmtplib/smtp.py", line 400, in send_message
    raise SMTPRecipientsRefused(refused)
SMTPRecipientsRefused: {EVIL}"""
SCREENSHOT = ROOT / "docs" / "images" / "panel.png"
"""The screenshot docs/opslib.md shows; this test rewrites it when ``UPDATE_SCREENSHOTS=1``."""
DASHBOARD_SCREENSHOT = ROOT / "docs" / "images" / "dashboard.png"
"""The dashboard's flow tab as docs/opslib.md shows it (rewritten with ``UPDATE_SCREENSHOTS=1`` too)."""


SMS = 230
"""send_sms dead letters of one group: more than a page of the entry list (200)."""


MAIL_REPLAY_OF = "1796000000000-0"


def add_other_kind(night: NightStack) -> None:
    """Beside the night's 40: one send_email dead letter with HTML in its error and traceback (replayed twice
    already), and :data:`SMS` send_sms ones."""
    client = redis.Redis.from_url(night.redis_url)
    try:
        fields = {
            "kind": "send_email",
            "order_id": "4471",
            "attempts": "4",
            "reason": "exhausted",
            "error": f"SMTPRecipientsRefused: {EVIL}",
            "traceback": MAIL_TRACEBACK,
            "replay_of": MAIL_REPLAY_OF,  # it failed again after two replays
            "replays": "2",
        }
        client.xadd(Keys(night.prefix).dead, fields)  # type: ignore[arg-type]
        pipe = client.pipeline()
        for n in range(SMS):
            sms = {"kind": "send_sms", "attempts": "3", "reason": "exhausted", "error": f"GatewayTimeout: {n} s"}
            pipe.xadd(Keys(night.prefix).dead, sms)  # type: ignore[arg-type]
        pipe.execute()
    finally:
        client.close()


def add_late_dead_letter(night: NightStack) -> None:
    """One more send_email dead letter, for the Auto-refresh to find."""
    client = redis.Redis.from_url(night.redis_url)
    try:
        late = {"kind": "send_email", "attempts": "4", "reason": "exhausted", "error": "SMTPServerDisconnected: 421"}
        client.xadd(Keys(night.prefix).dead, late)  # type: ignore[arg-type]
    finally:
        client.close()


def labelled(within: Page | Locator, kind: str, label: str) -> Locator:
    """The control of one ipywidget (``kind``: its class, e.g. widget-text) whose description is ``label``,
    inside ``within`` (the page, or a part of it where a description is used twice)."""
    exact = re.compile(f"^{re.escape(label)}$")
    page = within if not hasattr(within, "page") else within.page  # filter(has=) takes a page's locator
    return within.locator(f".{kind}").filter(has=page.locator("label", has_text=exact)).locator("input, select")


def kind_filter(page: Page) -> Locator:
    """The filters' Kind selector (the Pause control has a Kind selector too)."""
    return labelled(page.locator(".opslib-filters"), "widget-dropdown", "Kind")


def type_in(page: Page | Locator, label: str, value: str) -> None:
    field = labelled(page, "widget-text", label)
    field.fill(value)
    field.press("Enter")  # the filters' texts update on Enter (continuous_update=False)


def wait_text(locator: Locator, text: str, timeout_s: float = 30) -> None:
    locator.get_by_text(text).first.wait_for(timeout=timeout_s * 1000)


def text_of(option: Locator) -> str:
    """An option's text as the panel wrote it (the browser shows its spaces as non-breaking ones)."""
    return option.inner_text().replace("\xa0", " ")


def listed_ids(select: Locator) -> list[str]:
    """The dead ids of the entry list, top to bottom (each option's text starts with its id)."""
    return [text.replace("\xa0", " ").split(" ", 1)[0] for text in select.locator("option").all_inner_texts()]


def drive(page: Page, voila: str, night: NightStack) -> None:
    """Every control of the panel, in the order an analyst would use them."""
    page.goto(voila, timeout=90_000)
    page.wait_for_selector(".opslib-groups table", timeout=90_000)
    counts = page.locator(".opslib-counts")
    wait_text(counts, f"{40 + 1 + SMS} dead letters")
    flow = page.locator(".opslib-flow")  # the night's worker ran the demo's jobs within the hour
    assert flow.locator("svg polyline").count() == 2
    assert re.search(r"last hour +[1-9][\d,]* succeeded · [1-9][\d,]* died", flow.inner_text()), flow.inner_text()
    page.get_by_role("button", name="Auto-refresh").click()  # on: the panel reads the queue every 10 s
    add_late_dead_letter(night)
    wait_text(counts, f"{40 + 2 + SMS} dead letters", 45)
    page.get_by_role("button", name="Auto-refresh").click()  # off again: the rest runs without reloads
    every_tab(page)
    view_from_its_url(page, voila)
    open_tab(page, "Dead")
    escaping(page)
    filters(page)
    paging_and_csv(page)
    pause_and_resume(page)
    barcode_story(page)


def open_tab(page: Page, title: str) -> Locator:
    """Click the dashboard's tab whose title starts with ``title``; its content (``.opslib-tab-<name>``)."""
    page.locator(".lm-TabBar-tab").filter(has_text=re.compile(f"^{title}")).click()
    return page.locator(f".opslib-tab-{title.lower()}")


def every_tab(page: Page) -> None:
    """Each tab of the dashboard: its count following its filters, a bad filter clearing its list, an action
    refused without a reason, the flow's window; the page's address and link following the view."""
    waiting = open_tab(page, "Waiting")  # the night has settled: nothing waits
    wait_text(waiting.locator(".opslib-tab-count"), "0 of 0 waiting jobs match the filters")
    type_in(waiting.locator(".opslib-tab-filters"), "From", "9 o'clock")
    wait_text(waiting.locator(".opslib-tab-message"), 'From="9 o\'clock" is not a time')
    wait_text(waiting.locator(".opslib-tab-count"), "no waiting jobs shown: the filter is not one")
    type_in(waiting.locator(".opslib-tab-filters"), "From", "")
    running = open_tab(page, "Running")
    wait_text(running.locator(".opslib-tab-count"), "of 0 running jobs match the filters")
    delayed = open_tab(page, "Delayed")  # next week's reminders
    labelled(delayed.locator(".opslib-tab-filters"), "widget-dropdown", "Kind").select_option(label="send_reminder")
    count = delayed.locator(".opslib-tab-count")
    count.get_by_text(re.compile(r"^[1-9][\d,]* of [1-9][\d,]* delayed jobs match the filters$")).wait_for()
    jobs = labelled(delayed, "widget-select-multiple", "Jobs")
    assert " · runs at " in text_of(jobs.locator("option").first) and " CET · send_reminder · " in text_of(
        jobs.locator("option").first
    )
    jobs.select_option(index=0)
    delayed.get_by_role("button", name="Cancel delayed").click()  # no reason: refused, nothing asked
    wait_text(delayed.locator(".opslib-tab-message"), "cancel needs a reason")
    page.wait_for_url(re.compile(r"\?tab=delayed&kind=send_reminder&sel=[0-9a-f]+$"))  # the address follows
    archived = open_tab(page, "Archived")
    labelled(archived.locator(".opslib-tab-filters"), "widget-dropdown", "Kind").select_option(label="render_tickets")
    archived.locator(".opslib-tab-count").get_by_text(re.compile(r"^40 of [\d,]+ archived entries")).wait_for()
    open_tab(page, "Flow")
    page.get_by_role("button", name="6h").click()
    charts = page.locator(".opslib-flow-tab")
    wait_text(charts, "over the last 6h")
    assert charts.locator("svg").count() >= 2 and "render_tickets" in charts.inner_text()
    page.wait_for_url(re.compile(r"\?tab=flow&window=6h$"))
    assert page.locator(".opslib-view-link a").get_attribute("href") == "?tab=flow&window=6h"
    assert "token" not in page.url  # the address a colleague gets carries no token
    page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)


def view_from_its_url(page: Page, voila: str) -> None:
    """A view's link opened in a new page (as from an alert): the archived tab, filtered as the link says."""
    other = page.context.new_page()
    try:
        other.goto(f"{voila}&tab=archived&kind=render_tickets&q=SeatLabelInvalid", timeout=90_000)
        count = other.locator(".opslib-tab-archived .opslib-tab-count")
        count.get_by_text(re.compile(r"^40 of [\d,]+ archived entries match the filters$")).wait_for(timeout=90_000)
        assert other.locator(".lm-TabBar-tab.lm-mod-current").inner_text().startswith("Archived")
        filters = other.locator(".opslib-tab-archived .opslib-tab-filters")
        assert labelled(filters, "widget-text", "Search").input_value() == "SeatLabelInvalid"
        other.wait_for_url(re.compile(r"\?tab=archived&kind=render_tickets&q=SeatLabelInvalid$"))
    finally:
        other.close()


def escaping(page: Page) -> None:
    groups = page.locator(".opslib-groups")
    assert "SeatLabelInvalid: &lt;str&gt;" in groups.inner_html()
    assert "&lt;img src=x onerror=alert(" in groups.inner_html()  # escaped: shown as text, no element
    assert page.locator(".opslib-groups img").count() == 0
    kind_filter(page).select_option(label="all kinds")
    group = labelled(page, "widget-dropdown", "Group")
    group.select_option(label="1 × SMTPRecipientsRefused: <img src=x onerror=alert(<num>)>")
    from playwright.sync_api import expect

    entries = labelled(page, "widget-select-multiple", "Entries")
    expect(entries.locator("option").first).to_contain_text("SMTPRecipientsRefused")  # the group's one entry
    assert " · ↻ 2 replays · " in text_of(entries.locator("option").first)  # its badge, in the list
    entries.select_option(index=0)  # its traceback, HTML as text
    traceback = page.locator(".opslib-entry pre")
    wait_text(page.locator(".opslib-entry"), "SMTPRecipientsRefused")
    assert traceback.inner_text() == MAIL_TRACEBACK and page.locator(".opslib-entry img").count() == 0
    assert f"↻ 2 replays failed again; it came from {MAIL_REPLAY_OF}" in page.locator(".opslib-entry").inner_text()


def pause_and_resume(page: Page) -> None:
    """The header's Pause / Resume control: send_sms held with a reason, the header says so, then resumed."""
    control = page.locator(".opslib-pause")
    wait_text(control, "no kind is paused")
    labelled(control, "widget-dropdown", "Kind").select_option(label="send_sms")
    type_in(control, "Reason", "SMS gateway down, INC-2230")
    control.get_by_role("button", name="Pause").click()
    wait_text(control, "send_sms paused since")
    said = control.inner_text().replace("\xa0", " ")
    assert " CET by " in said and "(SMS gateway down, INC-2230); 0 jobs wait" in said, said
    control.get_by_role("button", name="Resume").click()
    wait_text(control, "resumed: 0 waiting jobs are back on the queue")
    wait_text(control, "no kind is paused")


def filters(page: Page) -> None:
    groups = page.locator(".opslib-groups")
    kind_filter(page).select_option(label="render_tickets")  # the table follows the kind
    page.wait_for_function("!document.querySelector('.opslib-groups').innerText.includes('SMTPRecipientsRefused')")
    type_in(page.locator(".opslib-filters"), "Search", "14-C")  # the error, or a payload field
    wait_text(page.locator(".opslib-preview"), "A replay would take 1 entry (newest first)")
    type_in(page.locator(".opslib-filters"), "Search", "")
    type_in(page.locator(".opslib-filters"), "To", "2h")  # dead more than 2 h ago: none
    wait_text(groups, "No dead letters of render_tickets match the filters.")
    type_in(page.locator(".opslib-filters"), "To", "")
    type_in(page.locator(".opslib-filters"), "From", "2h")
    wait_text(page.locator(".opslib-preview"), "A replay would take 40 entries")


def paging_and_csv(page: Page) -> None:
    """send_sms's 230 entries: 200 on the first page, 30 on the next; the CSV of the whole group."""
    from playwright.sync_api import expect

    entries = labelled(page, "widget-select-multiple", "Entries")
    kind_filter(page).select_option(label="send_sms")
    wait_text(page.locator(".opslib-page"), f"entries 1–200 of {SMS}, newest first")
    expect(entries.locator("option")).to_have_count(200)
    assert text_of(entries.locator("option").first).endswith("GatewayTimeout: 229 s")
    page.get_by_role("button", name="Older ›").click()
    wait_text(page.locator(".opslib-page"), f"entries 201–{SMS} of {SMS}")
    expect(entries.locator("option")).to_have_count(SMS - 200)
    assert text_of(entries.locator("option").last).endswith("GatewayTimeout: 0 s")
    page.get_by_role("button", name="‹ Newer").click()
    wait_text(page.locator(".opslib-page"), f"entries 1–200 of {SMS}")
    page.get_by_role("button", name="CSV…").click()
    link = page.locator(".opslib-csv a")
    link.wait_for()
    assert f"({SMS} entries)" in link.inner_text()
    with page.expect_download() as download:
        link.click()
    saved = Path(download.value.path()).read_text(encoding="utf-8").splitlines()
    assert download.value.suggested_filename.startswith("dead-letters-send_sms-")
    assert saved[0].startswith("dead_id,dead_at,kind,") and len(saved) == SMS + 1
    assert ",GatewayTimeout: 229 s," in saved[1]  # newest first, as the list


def barcode_story(page: Page) -> None:
    """The 40 renders that died on a bad seat label: read one, discard it, replay the rest, follow the replay."""
    from playwright.sync_api import expect

    group = labelled(page, "widget-dropdown", "Group")
    entries = labelled(page, "widget-select-multiple", "Entries")
    kind_filter(page).select_option(label="render_tickets")
    group.select_option(label="40 × SeatLabelInvalid: <str> is not a row letter and a seat number")
    expect(entries.locator("option")).to_have_count(40)
    assert " CET · render_tickets · " in text_of(entries.locator("option").first)
    listed = listed_ids(entries)
    preview = page.locator(".opslib-preview")
    assert re.findall(r"\d{13}-\d+", preview.inner_text())[:20] == listed[:20]  # one order: newest first
    entries.select_option(index=0)
    wait_text(preview, "A replay would take 1 selected entry")
    traceback = page.locator(".opslib-entry pre")
    assert "Traceback (most recent call last):\n" in traceback.inner_text()
    assert "SeatLabelInvalid" in traceback.inner_text()
    page.get_by_role("button", name="Replay…").click()  # the question and Confirm, right under the list
    wait_text(page.locator(".widget-html"), "Replay 1 selected dead letter")
    picture(page)
    page.get_by_role("button", name="Cancel", exact=True).click()
    type_in(page.locator(".opslib-actions"), "Reason", "order refunded, INC-2211")
    page.get_by_role("button", name="Discard…").click()
    confirm = page.get_by_role("button", name="Confirm discard")
    below_list = confirm.bounding_box()["y"] - (entries.bounding_box()["y"] + entries.bounding_box()["height"])  # type: ignore[index]
    assert 0 < below_list < 150, f"Confirm stands {below_list} px below the entry list"
    confirm.click()
    wait_text(page.locator(".opslib-result"), "Discarded 1 of 1", 60)
    wait_text(preview, "A replay would take 39 entries")  # none selected: the whole group
    page.get_by_role("button", name="Replay…").click()
    page.get_by_role("button", name="Confirm replay").click()
    wait_text(page.locator(".opslib-result"), "Replayed 39 of 39", 60)
    status = page.locator(".opslib-status")
    deadline = time.monotonic() + 90
    while "succeeded: 39" not in status.inner_text():
        assert time.monotonic() < deadline, f"the status did not reach succeeded: 39: {status.inner_text()}"
        page.get_by_role("button", name="Refresh status").click()
        time.sleep(0.5)
    assert f"{2 + SMS} dead letters" in page.inner_text(".opslib-counts")  # send_email's two and the SMS are left


def picture(page: Page) -> None:
    """Save the page as ``test-artifacts/panel.png``, this machine's folders in tracebacks shown as placeholders."""
    page.evaluate(
        """(paths) => { for (const pre of document.querySelectorAll('.opslib-entry pre'))
               for (const [path, shown] of paths) pre.textContent = pre.textContent.split(path).join(shown); }""",
        [list(pair) for pair in MACHINE_PATHS],
    )
    page.screenshot(path=str(ARTIFACTS / "panel.png"), full_page=True)


def test_every_control_of_the_panel_in_a_browser(chromium: Path, night: NightStack, voila: str) -> None:
    from playwright.sync_api import sync_playwright

    # The organizer fixed the seat map (14-C -> 14C), so the replayed renders succeed.
    with psycopg.connect(night.database_url, autocommit=True) as conn:
        conn.execute("UPDATE seats SET label = replace(label, '-', '') WHERE label LIKE '%-%'")
    ARTIFACTS.mkdir(exist_ok=True)
    blocked: list[str] = []  # requests the guard aborted
    answered: list[str] = []  # requests that got a response
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1150})

            def only_loopback(route, request):  # type: ignore[no-untyped-def]
                if is_loopback(request.url):
                    route.continue_()
                else:
                    blocked.append(request.url)
                    route.abort()

            context.route("**/*", only_loopback)
            context.on("requestfinished", lambda request: answered.append(request.url))
            page = context.new_page()
            try:
                drive(page, voila, night)
                # The guard itself: a request the page makes to another host is aborted, and recorded.
                reached = page.evaluate(f"fetch('{OUTSIDE}').then(() => 'reached', () => 'refused')")
                assert reached == "refused"
            except BaseException:
                page.screenshot(path=str(ARTIFACTS / "panel_browser_failure.png"), full_page=True)
                shutil.copy(night.log_path, ARTIFACTS / "panel_browser_worker.log")
                raise
        finally:
            browser.close()
    assert OUTSIDE in blocked, f"the guard did not see the page's request to {OUTSIDE}: {blocked}"
    assert answered and all(is_loopback(url) for url in answered), [u for u in answered if not is_loopback(u)]
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        SCREENSHOT.parent.mkdir(exist_ok=True)
        shutil.copy(ARTIFACTS / "panel.png", SCREENSHOT)
        shutil.copy(ARTIFACTS / "dashboard.png", DASHBOARD_SCREENSHOT)
        store_panel_picture(SCREENSHOT.read_bytes())
