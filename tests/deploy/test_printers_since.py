"""Hostile text through the printers added after the failure text was made safe (issue #30).

The dashboard (its tabs, kind control, flow charts and view link), the
``--json`` / ``--csv`` forms of ``kinds``, ``actions``, ``find`` and
``status``, ``find``'s ``matched`` column, the cancel rows, the throttle,
fair-key, unique-key and queue columns, argparse's errors and ``python -m
worker health``'s line: each is fed kind names, field names, ids, fair and
unique keys and reasons holding escapes, bidi and zero-width characters and
formula starts, and each is read for a raw control and a formula cell.
:mod:`tests.deploy.test_failure_text` covers the places that existed before.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator

import ipywidgets as w
import pandas as pd
import pytest
import redis

import opslib
from opslib.cli import main as opslib_main
from opslib.display import spreadsheet_safe
from opslib.panel.dashboard import Dashboard
from opslib.panel.flow_chart import flow_charts_html
from opslib.panel.view_state import TABS
from tests.deploy.test_health import health
from tests.opslib.helpers import bury
from tests.opslib.helpers_archive import archive_dead_stream
from worker.printable import UNSAFE
from worker.store.enqueue import enqueue
from worker.store.keys import GROUP, Keys
from worker.store.versions import VERSION_FIELD, WAITING_SINCE_FIELD
from worker.store.wire import encode_member

RAW = {chr(code) for code in UNSAFE if code != 0x0A}
"""Characters that must never reach a printer raw (a newline may, between lines)."""
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
KIND = "=k\x1b[31m\u202eind"
FIELD = "=HYPERLINK(\x1b]0;t\x07)"
JOB_ID = "@j\x1b[1m\u2066"
FAIR = "+org\x1b]52;c;eA==\x07\u200b"
UNIQUE = "@u\x1b[2J\u202e"
WHY = "-why\x1b]0;t\x07\u202e"
BY = "+by\x9b31m\u2067"
CONSUMER = "c\x1b]0;t\x07\u202e"


def raw_in(text: str) -> set[str]:
    return {char for char in text if char in RAW}


def formula_cells(csv_text: str) -> list[str]:
    """Every cell of ``csv_text`` (header and index included) that a spreadsheet would read as a formula."""
    rows = pd.read_csv(io.StringIO(csv_text), dtype=str, header=None, keep_default_na=False)
    return [cell for cell in rows.to_numpy().ravel() if str(cell).startswith(FORMULA_STARTS)]


@pytest.fixture
def hostile(r: redis.Redis, keys: Keys, archive_url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A hostile kind in every state (dead and archived, dead, waiting with a unique key, waiting in
    ``fair:queue`` for a hostile fair key's turn, running on a hostile consumer, delayed), with hostile field
    names, paused with a hostile reason by a hostile name."""
    kwargs = r.connection_pool.connection_kwargs
    monkeypatch.setenv("REDIS_URL", f"redis://{kwargs['host']}:{kwargs['port']}/0")
    monkeypatch.setenv("QUEUE_PREFIX", keys.prefix)
    error = {"attempts": "2", "error": f"E: {WHY}", "traceback": f"Traceback:\n  {WHY}"}
    archived = bury(r, keys, {"kind": KIND, "job_id": JOB_ID, FIELD: "v\u202e"}, error)
    archive_dead_stream(r, keys, archive_url)
    dead = bury(r, keys, {"kind": KIND, "job_id": "=j2", FIELD: "=1+1"}, error)
    running = enqueue(r, KIND, {"order_id": "4470"}, prefix=keys.prefix)
    r.xreadgroup(GROUP, CONSUMER, {keys.jobs: ">"}, count=1)
    enqueue(r, KIND, {"order_id": "4472"}, unique_key=UNIQUE, prefix=keys.prefix)
    enqueue(r, KIND, {"order_id": "4471", FIELD: "x"}, fair_key=FAIR, prefix=keys.prefix)  # behind it: fair:queue
    enqueue(r, KIND, {"order_id": "4473", FIELD: "\x1b[1m"}, delay_s=3600, prefix=keys.prefix)
    opslib.pause(KIND, reason=WHY, by=BY, client=r, prefix=keys.prefix)
    return {"archived": archived, "dead": dead, "running": running}


def run_cli(args: list[str], capfd: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = opslib_main(args, stdin=io.StringIO(""))
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    out, err = capfd.readouterr()
    return code, out, err


def test_the_cli_tables_added_since_print_no_raw_control_and_export_no_formula(
    hostile: dict[str, str], r: redis.Redis, keys: Keys, capfd: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(["replay", hostile["dead"], "--yes", f"--reason={WHY}"], capfd)
    assert code == 0 and not raw_in(out + err), out + err
    batch = out.split("batch ")[1].split()[0]
    commands = [["kinds"], ["actions"], ["find", "4471"], ["find", UNIQUE], ["status", batch], ["delayed"]]
    cancel = ["cancel", hostile["running"], f"--reason={WHY}"]
    code, out, err = run_cli([*cancel, "--yes"], capfd)  # a running job: marked cancelled, with the reason
    assert code == 0 and not raw_in(out + err), out + err
    [(_id, running)] = r.xrange(keys.jobs, hostile["running"], hostile["running"])
    cancelled = running[b"job_id"].decode()
    commands += [[*cancel, "--dry-run"], ["find", cancelled], ["dead"], ["stats"], ["pending"]]
    tables = (["kinds"], ["actions"], ["find", "4471"], ["find", UNIQUE], ["find", cancelled], ["status", batch])
    for table in (*tables, ["dead"]):
        commands += [[*table, "--json"], [*table, "--csv"]]
    printed = {}
    for args in commands:
        code, out, err = run_cli(args, capfd)
        assert code == 0, (args, out, err)
        printed[" ".join(args)] = out + err
        if "--json" in args:
            assert all(json.loads(line) for line in out.splitlines()), args  # still JSON, one object a line
        if "--csv" in args:
            assert not formula_cells(out), (args, formula_cells(out))
    raw = {command: raw_in(text) for command, text in printed.items() if raw_in(text)}
    assert not raw, f"raw controls printed: {raw}"
    kinds_csv = printed["kinds --csv"]
    assert "'=k\\x1b[31m\\u202eind," in kinds_csv and "'+by\\x9b31m\\u2067,'-why" in kinds_csv  # index, by, reason
    assert "'=HYPERLINK(\\x1b]0;t\\x07)" in printed["dead --csv"]  # a payload field's name is a column
    assert "fair key '+org\\x1b]52;c;eA==\\x07\\u200b': waiting for its turn" in printed["find 4471 --csv"]
    found = printed[f"find {UNIQUE}"].splitlines()
    assert [line.split()[0] for line in found if not line.startswith("note:")] == ["unique", "waiting"]
    assert all(line.endswith("[matched unique_key]") for line in found if not line.startswith("note:"))
    assert "=k\\x1b[31m\\u202eind" in printed[" ".join([*cancel, "--dry-run"])]
    assert "'-why\\x1b]0;t\\x07\\u202e" in printed[f"find {cancelled} --csv"]  # the cancel row's reason


def test_argparse_errors_quote_what_was_typed_with_escapes(capfd: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run_cli(["dead", "--x\x1b]0;title\x07\u202e"], capfd)
    assert code == 2 and "unrecognized arguments: --x\\x1b]0;title\\x07\\u202e" in err and not raw_in(err), err


def widget_texts(widget: w.Widget) -> Iterator[tuple[str, str]]:
    """What a page shows of ``widget`` and its children: HTML and labels' values, descriptions, option labels,
    tab titles (not what a person types into a text box, which is theirs)."""
    for name in ("value", "description", "tooltip"):
        value = getattr(widget, name, None)
        if isinstance(value, str) and not isinstance(widget, w.Text | w.Textarea):
            yield f"{type(widget).__name__}.{name}", value
    for option in getattr(widget, "options", None) or ():
        yield f"{type(widget).__name__} option", str(option[0] if isinstance(option, tuple) else option)
    for title in getattr(widget, "titles", None) or ():
        yield "tab title", str(title)
    for child in getattr(widget, "children", ()):
        yield from widget_texts(child)


def test_every_tab_of_the_dashboard_shows_hostile_text_as_escapes(
    hostile: dict[str, str], r: redis.Redis, keys: Keys
) -> None:
    shown: dict[str, list[tuple[str, str]]] = {}
    for tab in TABS:
        board = Dashboard(r, keys.prefix, query=f"tab={tab}&window=%1b%5d0;x%07")  # a bad window: one line, escaped
        assert "window=&#x27;\\x1b]0;x\\x07&#x27; in the link is not a window" in board.notice.value
        if tab in board.jobs:
            jobs = board.jobs[tab]
            assert len(jobs.shown) >= 1, tab
            jobs.jobs.value = tuple(jobs.shown.index)
            jobs.reason.value = WHY
            jobs.buttons[0].click()  # the question names the reason
            assert "\\x1b]0;t\\x07\\u202e" in jobs.question.value, tab
        elif tab == "dead":
            board.dead.entries.value = (hostile["dead"],)
        assert board.kind_control.kind.options[0] == ("=k\\x1b[31m\\u202eind", KIND)
        shown[tab] = [(where, text) for where, text in widget_texts(board.widget) if raw_in(text)]
    assert not any(shown.values()), shown
    periods = pd.date_range("2026-12-02 04:00", periods=2, freq="1min", tz="UTC")
    flow = pd.DataFrame(
        {"period": periods, "kind": [KIND] * 2, "queue": ["bulk"] * 2, "succeeded": [1, 2], "retried": 0, "dead": 0}
    )
    chart = flow_charts_html(flow, "1h")
    assert "bulk / =k\\x1b[31m\\u202eind" in chart and not raw_in(chart)


def test_the_health_line_shows_a_paused_and_an_awaiting_kind_with_escapes(
    redis_url: str, r: redis.Redis, keys: Keys, prefix: str
) -> None:
    r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
    r.zadd(keys.workers, {"health-1": time.time() + 60})
    r.hset(keys.paused, KIND, json.dumps({"since": "2026-12-02T04:00:00+00:00", "by": BY, "reason": WHY}))
    waiting = {"kind": KIND, "job_id": "a1", VERSION_FIELD: "2", WAITING_SINCE_FIELD: str(time.time())}
    r.zadd(keys.delayed, {encode_member(waiting): time.time()})
    said = health(redis_url, prefix, WORKER_NAME="health-1")
    assert said.returncode == 0 and not raw_in(said.stdout), said.stdout
    assert "paused: =k\\x1b[31m\\u202eind since 2026-12-02T04:00:00+00:00 by +by\\x9b31m\\u2067" in said.stdout
    assert "waiting for a worker: 1 =k\\x1b[31m\\u202eind v2" in said.stdout


@pytest.mark.parametrize(
    "frame",
    [
        pd.DataFrame({"n": [1]}, index=pd.Index(["=cmd"], name="kind")),  # pandas' str index (kinds())
        pd.DataFrame({"n": [1]}, index=pd.Index(["@SUM(1)"], dtype=object)),
        pd.DataFrame({"n": [1]}, index=pd.MultiIndex.from_arrays([["+1"], [2]], names=["kind", "n"])),
        pd.DataFrame({"-2+3": [1]}),  # a payload field's name as a column
        pd.DataFrame({"text": pd.array(["\t=x"], dtype="string")}),
    ],
)
def test_spreadsheet_safe_neutralises_cells_index_and_names(frame: pd.DataFrame) -> None:
    exported = spreadsheet_safe(frame).to_csv()
    assert not formula_cells(exported) and "'" in exported, exported
    assert frame.to_csv() != exported  # the frame itself is left as it was
