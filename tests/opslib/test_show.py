"""``opslib.show``: every kind of dead entry, whole and readable, in text and escaped HTML, with its archive row."""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
import pytest
import redis

import opslib
from opslib.cli import EXIT_FAILED, EXIT_OK, main
from opslib.display import MONOSPACE
from opslib.errors import OpslibError
from tests.helpers import Workers
from tests.opslib.helpers import KINDS, bury, seat_dead_letters
from worker.archive.table import fields_to_json, migrate
from worker.store.keys import Keys

POISON = {
    "attempts": "3",
    "error": "Poison: delivered 3 times (MAX_DELIVERIES=3) without an outcome; last consumer w2",
    "traceback": "",
    "reason": "poison",
    "failed_at": "2026-11-30T21:14:00.000Z",
    "worker": "w3",
}


def test_an_exhausted_entry_shows_its_error_signature_and_traceback_with_line_breaks(
    r: redis.Redis, keys: Keys, workers: Workers, at: dict[str, Any]
) -> None:
    dead_id = seat_dead_letters(r, keys, workers, labels=("14-C",))[0]
    entry = opslib.show(dead_id, archive=False, **at)
    assert entry.where == "jobs:dead" and entry.fields["reason"] == "exhausted"
    assert entry.signature == "SeatLabelInvalid: <str> is not a row letter and a seat number"
    text = str(entry)
    assert text.startswith(f"Dead letter {dead_id} · seat_label · exhausted · in jobs:dead")
    assert "  signature   SeatLabelInvalid: <str> is not a row letter and a seat number" in text
    assert "\nTraceback:\n  Traceback (most recent call last):\n" in text
    assert "in seat_label\n" in text and "\\n" not in text
    page = entry._repr_html_()
    # Monospace inline: the ^^^^ markers line up wherever the page is rendered, <style> blocks or not.
    assert f'<pre style="white-space:pre-wrap;{MONOSPACE}">Traceback (most recent call last):\n' in page
    assert "monospace" in MONOSPACE
    assert "SeatLabelInvalid: &#x27;14-C&#x27; is not a row letter" in page
    assert '<code style="user-select:all">SeatLabelInvalid: &lt;str&gt; is not a row letter' in page


def test_permanent_and_poison_entries_show_their_reason(r: redis.Redis, keys: Keys, at: dict[str, Any]) -> None:
    permanent = bury(
        r,
        keys,
        {"kind": "charge", "job_id": "c-9", "attempts": "0", "order_id": "4471"},
        {"attempts": "1", "error": "CardDeclined: card 4242 was declined", "traceback": "Traceback ...\nCardDeclined",
         "reason": "permanent", "failed_at": "2026-11-30T21:14:00.000Z", "worker": "w1"},
    )  # fmt: skip
    poison = bury(r, keys, {"kind": "render_tickets", "job_id": "r-1", "order_id": "12"}, POISON)
    one = opslib.show(permanent, archive=False, **at)
    assert "· charge · permanent ·" in str(one) and "  order_id  4471" in str(one)
    two = opslib.show(poison, archive=False, **at)
    assert "· render_tickets · poison ·" in str(two)
    assert "Traceback: (none)" in str(two) and "<p>(none)</p>" in two._repr_html_()
    assert two.fields["attempts"] == "3" and two.signature.startswith("Poison: delivered <num> times")


def test_a_malformed_entry_with_binary_fields_is_shown_with_escapes(
    r: redis.Redis, keys: Keys, workers: Workers, at: dict[str, Any]
) -> None:
    r.xgroup_create(keys.jobs, "workers", id="0", mkstream=True)
    r.xadd(keys.jobs, {b"kind": b"seat_label", b"seat": b"\xff\xfe<b>", b"\xc3(": b"x"})
    workers.burst(KINDS)
    [(dead_id, _)] = r.xrange(keys.dead)
    entry = opslib.show(dead_id.decode(), archive=False, **at)
    assert entry.fields["reason"] == "malformed" and "is not UTF-8 text" in entry.error
    assert entry.binary == {"seat", "\\xc3("}
    assert (b"seat", b"\xff\xfe<b>") in entry.raw
    text = str(entry)
    assert "\\xff\\xfe<b>  (not UTF-8 text: bytes shown as \\x escapes" in text
    page = entry._repr_html_()
    assert "\\xff\\xfe&lt;b&gt;" in page and "\\xfe<b>" not in page


def test_untrusted_text_is_escaped_and_wide_payloads_are_cut_but_not_the_signature(
    r: redis.Redis, keys: Keys, at: dict[str, Any]
) -> None:
    long_error = "Boom: " + "x " * 400 + "<script>alert(1)</script>"
    dead_id = bury(
        r,
        keys,
        {"kind": "<img src=x onerror=alert(1)>", "note": "<script>alert(2)</script>" + "y" * 2000},
        {"error": long_error, "traceback": "<tb>\n  line 2", "reason": "exhausted"},
    )
    entry = opslib.show(dead_id, archive=False, **at)
    page = entry._repr_html_()
    assert "<script>" not in page and "<img" not in page and "<tb>" not in page
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in page
    assert "more characters: .fields[&#x27;note&#x27;] holds it whole" in page
    assert len(entry.fields["note"]) == 2025
    assert entry.signature in str(entry)  # whole, however long


def test_the_archive_row_tells_its_life_even_after_it_left_the_stream(
    r: redis.Redis, keys: Keys, pg_url: str, at: dict[str, Any]
) -> None:
    dead_id = bury(r, keys, {"kind": "seat_label", "job_id": "j1", "seat": "14-C"}, POISON)
    assert "no dead_letters table" in str(opslib.show(dead_id, conn=pg_url, **at))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        migrate(conn)
        assert "no row yet" in str(opslib.show(dead_id, conn=pg_url, **at))
        raw = list(r.xrange(keys.dead)[0][1].items())
        conn.execute(
            "INSERT INTO dead_letters (queue, dead_id, dead_at, kind, fields, status, replayed_at, replay_batch,"
            " replay_new_id, replay_outcome, replay_dead_id) VALUES (%s, %s, now(), 'seat_label', %s, 'replayed',"
            " '2026-11-30T21:30:00Z', 'b-1', '1764538200000-0', 'failed again', '1764538300000-0')",
            (keys.prefix, dead_id, json.dumps(fields_to_json(raw))),
        )
    r.xdel(keys.dead, dead_id)
    entry = opslib.show(dead_id, conn=pg_url, **at)
    assert entry.where == "the archive only" and entry.fields["seat"] == "14-C"
    text = str(entry)
    assert "status          replayed" in text and "replay_outcome  failed again" in text
    assert "replayed_at     2026-11-30 21:30:00 UTC (2026-11-30T21:30:00+00:00)" in text
    opslib.set_display_tz("Europe/Prague")
    try:
        assert "replayed_at     2026-11-30 22:30:00 CET" in str(opslib.show(dead_id, conn=pg_url, **at))
    finally:
        opslib.set_display_tz(None)


def test_an_unknown_id_is_one_clear_error_and_the_cli_prints_the_entry(
    r: redis.Redis, keys: Keys, redis_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    dead_id = bury(r, keys, {"kind": "seat_label", "seat": "1-A"}, POISON)
    with pytest.raises(opslib.OpslibError, match=r"no dead letter 1-0 in jobs:dead; ids come from"):
        opslib.show("1-0", archive=False, client=r, prefix=keys.prefix)
    with pytest.raises(opslib.OpslibError, match="is not a stream entry id"):
        opslib.show("14-C", client=r, prefix=keys.prefix)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("QUEUE_PREFIX", keys.prefix)
    monkeypatch.setenv("ARCHIVE_URL", "postgresql://nobody@127.0.0.1:1/none")  # the archive does not answer
    assert main(["show", dead_id]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith(f"Dead letter {dead_id} · seat_label · poison") and "cannot reach PostgreSQL" in out
    assert main(["show", "1-0"]) == EXIT_FAILED
    assert "no dead letter 1-0" in capsys.readouterr().err


def test_the_trace_id_links_to_the_trace_from_opslib_trace_url_escaped(
    r: redis.Redis, keys: Keys, at: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    trace_id, span_id = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    job = {"kind": "charge", "job_id": "c-7", "attempts": "0", "order_id": "4471",
           "traceparent": f"00-{trace_id}-{span_id}-01", "tracestate": "shop=checkout",
           "trace_link": "00-11111111111111111111111111111111-2222222222222222-01"}  # fmt: skip
    dead_id = bury(r, keys, job, {**POISON, "reason": "exhausted"})
    monkeypatch.setenv("OPSLIB_TRACE_URL", 'https://tempo.example/trace/{trace_id}?org="a"&view=<x>')
    entry = opslib.show(dead_id, archive=False, **at)
    assert entry.trace_ids == (trace_id, span_id)
    text = str(entry)
    shown = dict(re.findall(r"^  (trace_id|span_id|trace_url) +(.+)$", text, flags=re.M))
    assert shown == {
        "trace_id": trace_id,
        "span_id": span_id,
        "trace_url": f'https://tempo.example/trace/{trace_id}?org="a"&view=<x>',
    }
    assert "traceparent" not in text and "trace_link" not in text and "  order_id  4471" in text
    page = entry._repr_html_()
    href = f"https://tempo.example/trace/{trace_id}?org=&quot;a&quot;&amp;view=&lt;x&gt;"
    assert f'<a href="{href}" target="_blank" rel="noopener noreferrer">{trace_id}</a>' in page
    assert "<x>" not in page and "trace_url" not in page

    monkeypatch.delenv("OPSLIB_TRACE_URL")
    plain = opslib.show(dead_id, archive=False, **at)
    assert "trace_url" not in str(plain) and "<a href" not in plain._repr_html_()
    monkeypatch.setenv("OPSLIB_TRACE_URL", "javascript:alert(1)//{trace_id}")
    with pytest.raises(OpslibError, match=r"OPSLIB_TRACE_URL=.javascript:.* is not a trace URL"):
        str(opslib.show(dead_id, archive=False, **at))
