"""What a failure says, read back from every place it goes: redacted, bounded, safe to print.

Real workers fail real jobs (:mod:`tests.deploy.kinds_leaky`) through a
retry and a dead letter; the test then reads what they left in Redis, the
archive, every opslib frame and CLI command, the panel's HTML and CSV, the
runbook's page, the text and JSON logs and the span events, and looks for
the secrets, for raw control characters and for formula cells.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pandas as pd
import psycopg
import pytest
import redis

import opslib
from opslib.cli import main as opslib_main
from opslib.display import frame_html, frame_text
from opslib.panel.filters import entry_label
from opslib.panel.html import csv_link_html, entry_html, groups_html, table_html
from opslib.runbook import run_runbook
from tests.deploy.kinds_leaky import HUGE_CHARS, TOKENS
from tests.helpers import ROOT, Workers
from worker import enqueue
from worker.errors import SettingsError
from worker.observability.logs import MESSAGE_BYTES, TRACEBACK_BYTES
from worker.printable import UNSAFE
from worker.redact import capture, redact
from worker.settings import Settings
from worker.store.failures import ERROR_BYTES, describe_error
from worker.store.keys import Keys

KINDS = "tests.deploy.kinds_leaky"
CONFIGURED = "Conf1gPw77x"
"""The password of the worker's ARCHIVE_URL (PostgreSQL trusts the tests' connections and ignores it)."""
RAW = {chr(code) for code in UNSAFE if code != 0x0A}
"""Characters that must never reach a printer raw (a newline may, between lines)."""
FORMULA = re.compile(r"(^|,)[=+\-@\t\r]")


def with_password(url: str, password: str) -> str:
    parts = urlsplit(url)
    userinfo, _, host = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0] or "postgres"
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}"))


def leaks(text: str) -> list[str]:
    """The secrets ``text`` shows (any of the tokens, the configured password)."""
    return [secret for secret in (*TOKENS, CONFIGURED) if secret in text]


def raw_controls(text: str) -> set[str]:
    return {char for char in text if char in RAW}


@pytest.fixture
def leaky(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers, archive_url: str, tmp_path: Path, monkeypatch: Any
) -> dict[str, Any]:
    """Two ``leak`` jobs (one traced, JSON logs; one with text logs), a ``hostile`` one, raw hostile
    entries; every worker run to the end. Returns the logs, the spans and the dead entries."""
    configured_url = with_password(archive_url, CONFIGURED)
    env = {"ARCHIVE_URL": configured_url, "REDACT_PATTERNS": r"ordsecret_[A-Za-z]+ unused_(\d+)"}
    monkeypatch.setenv("ARCHIVE_URL", configured_url)
    monkeypatch.setenv("REDIS_URL", workers.redis_url)
    monkeypatch.setenv("QUEUE_PREFIX", prefix)
    spans_file = tmp_path / "spans.jsonl"
    enqueue(r, "leak", {"n": "0", "job_id": '=HYPERLINK("http://x")'}, prefix=prefix)
    json_log = workers.burst(KINDS, LOG_FORMAT="json", TRACE_SPANS_FILE=str(spans_file), **env).stdout
    enqueue(r, "leak", {"n": "1", "job_id": "@SUM(1+1)"}, prefix=prefix)
    enqueue(r, "hostile", {"job_id": "h1"}, prefix=prefix)
    r.xadd(keys.jobs, {"kind": "hostile", "job_id": "j\x1b[31m\u202e\nforged", "fi\x1b]0;t\x07eld\u2067": "v\u200b"})
    r.xadd(keys.jobs, {"kind": "=cmd|' /C calc'!A0\x1b]0;x\x07\u202e", "job_id": "+unknown"})
    text_log = workers.burst(KINDS, **env).stdout
    return {
        "json_log": json_log,
        "text_log": text_log,
        "spans": [json.loads(line) for line in spans_file.read_text().splitlines()],
        "dead": r.xrange(keys.dead),
    }


def read_frames(found: str) -> dict[str, pd.DataFrame]:
    """The frames opslib reads of the queue (and its archive), with ``find(found)``."""
    return {
        "dead_letters()": opslib.dead_letters(),
        "failure_groups()": opslib.failure_groups(),
        "archive()": opslib.archive(),
        "find()": opslib.find(found),
    }


def test_no_secret_of_a_failure_is_readable_anywhere(
    leaky: dict[str, Any], prefix: str, archive_url: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    dead = leaky["dead"]
    assert len(dead) == 5
    places: dict[str, str] = {"text log": leaky["text_log"], "JSON log": leaky["json_log"]}
    places["jobs:dead"] = repr(dead)
    with psycopg.connect(archive_url) as conn:
        archived = conn.execute("SELECT d::text FROM dead_letters d WHERE queue = %s", (prefix,)).fetchall()
    assert len(archived) == 5
    places["archive table"] = repr(archived)
    places["span events"] = json.dumps([span["events"] for span in leaky["spans"]])
    assert [e["name"] for e in leaky["spans"][-1]["events"]] == ["exception", "dead_letter"]

    frames = read_frames("@SUM(1+1)")
    for name, frame in frames.items():
        places[name] = frame.to_csv() + frame_text(frame) + frame_html(frame)
    leak_ids = [entry_id.decode() for entry_id, fields in dead if fields[b"kind"] == b"leak"]
    for dead_id in leak_ids:
        shown = opslib.show(dead_id)
        places[f"show({dead_id})"] = str(shown) + shown._repr_html_() + shown.attempts.to_csv()
        places[f"panel entry {dead_id}"] = entry_html(dead_id, frames["dead_letters()"].loc[dead_id])
    places["panel tables"] = table_html(frames["dead_letters()"]) + groups_html(frames["failure_groups()"])
    places["panel CSV"] = csv_of(csv_link_html(frames["dead_letters()"], "dead.csv"))
    for args in (["dead"], ["dead", "--csv"], ["groups"], ["archive"], ["find", "@SUM(1+1)"], ["show", leak_ids[0]]):
        opslib_main(args, stdin=io.StringIO(""))
        out, err = capfd.readouterr()
        places[f"python -m opslib {' '.join(args)}"] = out + err

    shown = {place: leaks(text) for place, text in places.items() if leaks(text)}
    assert not shown, f"secrets shown: {shown}"
    assert "ordsecret_" not in places["jobs:dead"].replace("ordsecret_***", "")

    # One signature for the two jobs whose tokens differ: grouped after redaction.
    groups = frames["failure_groups()"]
    [leak_group] = groups[groups["kinds"] == "leak"].itertuples()
    assert leak_group.count == 2 and "Bearer ***" in leak_group.signature


def test_a_process_isolated_handlers_secrets_are_hidden_too(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers, archive_url: str
) -> None:
    """``isolation="process"`` (added after the redaction) sends the child's traceback back as text, the cause
    of the exception re-raised: it is redacted and bounded with the rest, through a retry and a dead letter."""
    configured_url = with_password(archive_url, CONFIGURED)
    enqueue(r, "leak_isolated", {"n": "0"}, prefix=prefix)
    log = workers.burst(KINDS, ARCHIVE_URL=configured_url, REDACT_PATTERNS=r"ordsecret_[A-Za-z]+").stdout
    [(_dead_id, dead)] = r.xrange(keys.dead)
    assert dead[b"reason"] == b"exhausted" and dead[b"attempts"] == b"2", dead
    traceback = dead[b"traceback"].decode()
    assert "Traceback (most recent call last)" in traceback and "Bearer ***" in traceback
    assert dead[b"error"].endswith(b"order key ***") and len(dead[b"error"]) <= ERROR_BYTES  # REDACT_PATTERNS
    shown = {name: leaks(text) for name, text in (("jobs:dead", repr(dead)), ("log", log)) if leaks(text)}
    assert not shown, shown


def csv_of(link: str) -> str:
    return base64.b64decode(re.search(r"base64,([A-Za-z0-9+/=]+)", link).group(1)).decode()  # type: ignore[union-attr]


def test_no_control_reaches_a_printer_and_no_cell_is_a_formula(
    leaky: dict[str, Any], capfd: pytest.CaptureFixture[str]
) -> None:
    dead = {fields[b"job_id"].decode(): entry_id.decode() for entry_id, fields in leaky["dead"]}
    printed: dict[str, str] = {"text log": leaky["text_log"], "JSON log": leaky["json_log"]}
    frames = read_frames("h1")
    for name, frame in frames.items():
        printed[name] = frame_text(frame) + frame_html(frame)
    for job_id in ("h1", "j\x1b[31m\u202e\nforged", "+unknown"):
        letter = opslib.show(dead[job_id])
        printed[f"show {job_id!r}"] = str(letter) + letter._repr_html_()
        printed[f"panel entry {job_id!r}"] = entry_html(dead[job_id], frames["dead_letters()"].loc[dead[job_id]])
    printed["panel tables"] = table_html(frames["dead_letters()"]) + groups_html(frames["failure_groups()"])
    printed["panel entry list"] = "\n".join(entry_label(i, row) for i, row in frames["dead_letters()"].iterrows())
    commands = (["dead"], ["groups"], ["archive"], ["kinds"], ["replay", dead["h1"], "--dry-run"])
    for args in (*commands, ["show", dead["h1"]], ["show", dead["+unknown"]]):
        opslib_main(args, stdin=io.StringIO(""))
        out, err = capfd.readouterr()
        printed[f"python -m opslib {' '.join(args)}"] = out + err
        assert "\nforged" not in out + err, (args, out)  # the error's newline shows as \n: no forged line
    opslib_main(["find", "h1"], stdin=io.StringIO(""))
    found, _ = capfd.readouterr()
    printed["python -m opslib find"] = found
    assert len(found.splitlines()) == len(frames["find()"]) >= 1  # one line per place: no forged line

    raw = {place: raw_controls(text) for place, text in printed.items() if raw_controls(text)}
    assert not raw, f"raw controls printed: {raw}"
    assert "\\x1b]52;c;" in printed["python -m opslib show " + dead["h1"]]  # shown, as an escape
    assert "\\u202e" in printed["panel entry 'h1'"]
    for line in leaky["json_log"].splitlines():
        json.loads(line)  # the escapes keep every line JSON

    opslib_main(["dead", "--csv"], stdin=io.StringIO(""))
    exported, _ = capfd.readouterr()
    panel_csv = csv_of(csv_link_html(frames["dead_letters()"], "dead.csv"))
    for name, text in (("dead --csv", exported), ("the panel's CSV link", panel_csv)):
        cells = [cell for row in pd.read_csv(io.StringIO(text), dtype=str).fillna("").itertuples() for cell in row]
        assert '\'=HYPERLINK("http://x")' in cells and "'@SUM(1+1)" in cells, name
        assert not [cell for cell in cells if str(cell).startswith(("=", "+", "-", "@"))], name


def test_the_runbook_page_shows_no_secret_and_no_raw_control(leaky: dict[str, Any], tmp_path: Path) -> None:
    page = run_runbook("leak", out=tmp_path / "leak").html.read_text()
    assert "Bearer ***" in page and not leaks(page)
    page = run_runbook("hostile", out=tmp_path / "hostile").html.read_text()
    assert "\\u202eevil" in page and not raw_controls(page.replace("\r", "")), raw_controls(page)


def test_a_20_mb_error_is_stored_cut_with_its_digest_and_costs_one_read(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers
) -> None:
    peaks = {}
    for kind in ("small", "huge"):
        enqueue(r, kind, {}, prefix=prefix)
        done = subprocess.run(
            [sys.executable, "-c", PEAK_RSS],
            cwd=ROOT,
            env=workers.env(KINDS, ARCHIVE_URL="off"),  # the archive's client would hide the worker's own peak
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        peaks[kind] = int(re.search(r"peak_rss_kb=(\d+)", done.stderr).group(1))  # type: ignore[union-attr]
        assert max(len(line.encode()) for line in done.stderr.splitlines()) <= MESSAGE_BYTES + 200
    [(_small, _), (_huge_id, huge)] = r.xrange(keys.dead)
    error = huge[b"error"].decode()
    whole = "q" * HUGE_CHARS  # the message as raised, which the digest is of
    assert len(huge[b"error"]) <= ERROR_BYTES and len(huge[b"traceback"]) <= 8192
    assert error.endswith(f"more characters; sha256 of the whole {hashlib.sha256(whole.encode()).hexdigest()[:16]}]")
    assert f"[{HUGE_CHARS + 12 - len(error.partition('…')[0]):,} more characters" in error
    assert len(huge[b"attempt_log"]) < 1024
    # The message itself (20 MiB, the handler's) and nothing else of that size: the digest encodes it in slices
    # (before: a copy for the traceback, its UTF-8, the log line, the move's command: 123 MB more).
    small, huge_peak = f"{peaks['small']:,} KiB", f"{peaks['huge']:,} KiB"
    print(f"the burst worker's peak resident size: {small} (1-character error), {huge_peak} (20 MiB)")
    assert peaks["huge"] - peaks["small"] < 1.5 * HUGE_CHARS / 1024, peaks


PEAK_RSS = (
    "import atexit, runpy, sys\n"
    "hwm = lambda: next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:'))\n"
    "atexit.register(lambda: print(f'peak_rss_kb={hwm()}', file=sys.stderr))\n"
    "sys.argv[1:] = ['--burst']\n"
    "runpy.run_module('worker', run_name='__main__')\n"
)
"""``python -m worker --burst`` that says its peak resident size (KiB) as it exits: the high-water mark of its own
memory (``VmHWM``), not ``ru_maxrss``, which a process started by another keeps from its parent across the exec
(here pytest's, larger than the worker's: both errors then read the same)."""


def test_a_settings_typo_shows_no_password(
    redis_url: str, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    where = urlsplit(redis_url).netloc.rpartition("@")[2]
    typo = f"redis//default:{CONFIGURED}@{where}/0"
    base = {k: v for k, v in os.environ.items() if not k.endswith(("_URL", "_URL_FILE"))}
    env = {**base, "REDIS_URL": typo, "ARCHIVE_URL": "off", "PYTHONPATH": str(ROOT), "WORKER_KINDS": KINDS}
    for args in (["--burst"], ["health"]):
        done = subprocess.run(
            [sys.executable, "-m", "worker", *args],
            cwd=ROOT,
            env={**env, "WORKER_DATA_DIR": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode != 0 and "REDIS_URL=" in done.stdout + done.stderr, done.stderr
        assert not leaks(done.stdout + done.stderr), done.stderr
    monkeypatch.setenv("REDIS_URL", typo)
    for args in (["stats"], ["dead"]):
        assert opslib_main(args, stdin=io.StringIO("")) != 0
        out, err = capfd.readouterr()
        assert "REDIS_URL=" in err and not leaks(out + err), err


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("postgresql://app:S3cr3tPw@db/app", "postgresql://app:***@db/app"),
        ("redis://:S3cr3tPw@cache:6379/0", "redis://:***@cache:6379/0"),
        ("redis//default:S3cr3tPw@127.0.0.1:6379/0", "redis//default:***@127.0.0.1:6379/0"),
        ("default:S3cr3tPw@127.0.0.1:6379", "default:***@127.0.0.1:6379"),
        ("GET /v1?api_key=S3cr3tPw&page=2", "GET /v1?api_key=***&page=2"),
        ("?apikey=S3cr3tPw&access_key=S3cr3tPw", "?apikey=***&access_key=***"),
        ("Authorization: Bearer S3cr3tPw", "Authorization: Bearer ***"),
        ("Proxy-Authorization: Basic dXNlcjpwYXNz", "Proxy-Authorization: Basic ***"),
        ("{'Authorization': 'Token S3cr3tPw'}", "{'Authorization': 'Token ***'}"),
        ("sent bearer S3cr3tPw.x.y", "sent bearer ***"),
        ("X-Api-Key: S3cr3tPw", "X-Api-Key: ***"),
        ('{"password": "S3cr3tPw", "user": "u"}', '{"password": "***", "user": "u"}'),
        ('"{\\"client_secret\\": \\"S3cr3tPw\\"}"', '"{\\"client_secret\\": \\"***\\"}"'),
        ("token=S3cr3tPw secret: S3cr3tPw", "token=*** secret: ***"),
        ("https://api.example/x failed: 502", "https://api.example/x failed: 502"),  # nothing to hide
        ("KeyError: 'token'", "KeyError: 'token'"),
    ],
)
def test_redact_knows_the_shapes_of_a_handlers_error(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_capture_cuts_with_a_marker_and_a_digest_and_keeps_a_short_text() -> None:
    assert capture("ValueError: short", 64) == "ValueError: short"
    cut = capture("x" * 10_000 + " password=S3cr3tPw", 256)
    assert len(cut.encode()) <= 256 and cut.endswith(
        f"sha256 of the whole {hashlib.sha256(b'x' * 10_000 + b' password=S3cr3tPw').hexdigest()[:16]}]"
    )
    tail = capture("Traceback\n" + "y" * 10_000 + "\nError: password=S3cr3tPw", 256, keep_end=True)
    assert len(tail.encode()) <= 256 and tail.endswith("Error: password=***") and "S3cr3tPw" not in tail
    assert len(capture("é" * 5000, 100).encode()) <= 100  # cut on a character, never inside one
    assert TRACEBACK_BYTES >= 8192


def test_the_configured_secrets_are_hidden_alone_and_the_names_are_not() -> None:
    Settings.from_env(
        {"REDIS_URL": "redis://app:Zq9vLw2x@h:6379/0", "DATABASE_URL": "postgresql://postgres@h/db?password=Pg7K%2Fx2"}
    )
    assert redact("refused Zq9vLw2x, Pg7K/x2 and Pg7K%2Fx2 for app on postgres") == (
        "refused ***, *** and *** for app on postgres"
    )


def test_a_secret_read_from_a_file_and_its_rotation_are_hidden_in_any_text(tmp_path: Path) -> None:
    secret_file = tmp_path / "redis_url"
    secret_file.write_text("redis://worker:Fi1eSecretQ@127.0.0.1:6379/0\n")
    settings = Settings.from_env({"REDIS_URL_FILE": str(secret_file)})
    secret_file.write_text("redis://worker:R0tatedSecretW@127.0.0.1:6379/0\n")
    settings.current("redis_url")  # the worker reads a rotated file again when it reconnects
    said = "a handler quoted Fi1eSecretQ and R0tatedSecretW in its error"
    assert redact(said) == "a handler quoted *** and *** in its error"
    assert describe_error(ValueError(said)) == "ValueError: a handler quoted *** and *** in its error"


def test_redact_patterns_hide_the_applications_own_shapes_and_a_bad_one_is_one_line() -> None:
    Settings.from_env({"REDACT_PATTERNS": r"sk_live_[A-Za-z0-9]+ order-key=(\S+)"})
    assert redact("charge sk_live_4eC39HqLyj failed, order-key=ab12 kept") == "charge *** failed, order-key=*** kept"
    with pytest.raises(SettingsError, match=r"REDACT_PATTERNS holds '\(unclosed', not a regular expression"):
        Settings.from_env({"REDACT_PATTERNS": "ok_[0-9]+ (unclosed"})
