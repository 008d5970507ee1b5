"""The dead-letter panel in a real browser, on the demo night.

Voilà serves ``notebooks/dead_letter_panel.ipynb`` on 127.0.0.1; Debian's
headless Chromium, driven by Playwright, selects the barcode group, clicks
Replay, confirms, and reads the replayed count and the status on the page.
Every request that is not to loopback is aborted (Voilà's page asks CDNs for
fonts). On failure a screenshot is saved in ``test-artifacts/``.

``make test`` installs Chromium where it can (root and apt-get); elsewhere
this test skips and says why, except under ``CI=true``, where it must run.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from tests.helpers import ROOT
from tests.notebooks.refresh_outputs import PANEL
from tests.notebooks.stack import NightStack
from worker.embedded import free_port

CHROMIUM = Path("/usr/bin/chromium")
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


def test_replay_the_barcode_group_from_the_panel(chromium: Path, night: NightStack, voila: str) -> None:
    from playwright.sync_api import sync_playwright

    # The organizer fixed the seat map (14-C -> 14C), so the replayed renders succeed.
    with psycopg.connect(night.database_url, autocommit=True) as conn:
        conn.execute("UPDATE seats SET label = replace(label, '-', '') WHERE label LIKE '%-%'")
    blocked: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})

            def only_loopback(route, request):  # type: ignore[no-untyped-def]
                if is_loopback(request.url):
                    route.continue_()
                else:
                    blocked.append(request.url)
                    route.abort()

            context.route("**/*", only_loopback)
            page = context.new_page()
            try:
                page.goto(voila, timeout=90_000)
                page.wait_for_selector(".opslib-groups table", timeout=90_000)
                assert "SeatLabelInvalid: &lt;str&gt;" in page.inner_html(".opslib-groups")
                group = page.locator(".widget-dropdown", has_text="Group").locator("select")
                barcode = "40 × SeatLabelInvalid: <str> is not a row letter and a seat number"
                group.select_option(label=barcode)
                page.wait_for_selector(".opslib-preview >> text=A replay would take 40 entries")
                page.get_by_role("button", name="Replay…").click()
                page.get_by_role("button", name="Confirm replay").click()
                result = page.locator(".opslib-result")
                result.get_by_text("Replayed 40 of 40").wait_for(timeout=60_000)
                status = page.locator(".opslib-status")
                deadline = time.monotonic() + 90
                while "succeeded: 40" not in status.inner_text():
                    assert time.monotonic() < deadline, f"the status did not reach succeeded: 40: {status.inner_text()}"
                    page.get_by_role("button", name="Refresh status").click()
                    time.sleep(0.5)
                assert "0 dead letters" in page.inner_text(".opslib-counts")
            except BaseException:
                ARTIFACTS.mkdir(exist_ok=True)
                shot = ARTIFACTS / "panel_browser_failure.png"
                page.screenshot(path=str(shot), full_page=True)
                shutil.copy(night.log_path, ARTIFACTS / "panel_browser_worker.log")
                raise
        finally:
            browser.close()
    assert all(not is_loopback(url) for url in blocked)
