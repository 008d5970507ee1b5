"""opslib reads a backlog in pages and up to a cap, and says when it stopped short.

The cap and the page are made small here (the backlog of a test is a few
thousand entries, not a million: ``benchmarks/`` has those); what is checked
is the promise: no command reads more than a page, no structure more than the
cap, the counts are exact below it, and ``attrs["notes"]`` names what was cut.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

import opslib
from opslib import bounded
from opslib.checks import queue_kinds
from worker.store.keys import Keys
from worker.store.wire import encode_member


class Recording(redis.Redis):
    """A client that keeps the COUNT / range of every XRANGE, ZRANGE and ZSCAN it sends."""

    reads: list[tuple[str, int]]

    def xrange(self, name: Any, min: Any = "-", max: Any = "+", count: Any = None) -> Any:
        self.reads.append(("xrange", -1 if count is None else count))
        return super().xrange(name, min, max, count)

    def zrange(self, name: Any, start: Any, end: Any, *args: Any, **kwargs: Any) -> Any:
        self.reads.append(("zrange", -1 if end == -1 else end - start + 1))
        return super().zrange(name, start, end, *args, **kwargs)

    def zscan(self, name: Any, cursor: Any = 0, match: Any = None, count: Any = None, **kwargs: Any) -> Any:
        self.reads.append(("zscan", -1 if count is None else count))
        return super().zscan(name, cursor, match, count, **kwargs)


@pytest.fixture
def small_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bounded, "CAP", 1000)
    monkeypatch.setattr(bounded, "PAGE", 100)


@pytest.fixture
def recording(redis_url: str) -> Any:
    client = Recording.from_url(redis_url)
    client.reads = []
    yield client
    client.close()


def fill(r: redis.Redis, keys: Keys, waiting: int, delayed: int) -> None:
    pipe = r.pipeline(transaction=False)
    for i in range(waiting):
        pipe.xadd(keys.jobs, {"kind": "send_email" if i % 3 else "render_tickets", "job_id": f"w{i}"})
    for i in range(delayed):
        pipe.zadd(keys.delayed, {encode_member({"kind": "send_email", "job_id": f"d{i}"}): 2e9 + i})
    pipe.execute()


def test_kinds_counts_exactly_below_the_cap_and_says_nothing(
    r: redis.Redis, keys: Keys, prefix: str, recording: Any, small_cap: None
) -> None:
    fill(r, keys, waiting=999, delayed=250)
    frame = opslib.kinds(client=recording, prefix=prefix)
    assert frame.loc["render_tickets", "waiting"] == 333 and frame.loc["send_email", "waiting"] == 666
    assert frame.loc["send_email", "delayed"] == 250
    assert frame.attrs["notes"] == []
    assert all(0 < n <= 100 for _, n in recording.reads), recording.reads


def test_kinds_stops_at_the_cap_and_says_what_it_counted(
    r: redis.Redis, keys: Keys, prefix: str, recording: Any, small_cap: None
) -> None:
    fill(r, keys, waiting=2500, delayed=1200)
    frame = opslib.kinds(client=recording, prefix=prefix)
    assert frame["waiting"].sum() == 1000
    assert frame.loc["send_email", "delayed"] == 1000
    notes = frame.attrs["notes"]
    assert any(n.startswith(f"waiting ({keys.jobs}): counted the first 1,000") for n in notes), notes
    assert (
        f"delayed ({keys.delayed}): counted the first 1,000 of 1,200 (opslib reads at most 1,000 per structure)"
        in notes
    )
    assert all(0 < n <= 100 for _, n in recording.reads), recording.reads
    assert sum(n for op, n in recording.reads if op == "xrange") <= 2 * 1000 + 10  # jobs and jobs:dead, capped


def test_a_kind_check_reads_the_queue_in_pages(r: redis.Redis, keys: Keys, recording: Any, small_cap: None) -> None:
    fill(r, keys, waiting=1500, delayed=10)
    assert queue_kinds(recording, [keys]) == {"render_tickets", "send_email"}
    assert all(0 < n <= 100 for _, n in recording.reads), recording.reads


def test_delayed_shows_the_soonest_up_to_the_cap_and_says_how_many_there_are(
    r: redis.Redis, keys: Keys, prefix: str, recording: Any, small_cap: None
) -> None:
    fill(r, keys, waiting=0, delayed=1300)
    frame = opslib.delayed(client=recording, prefix=prefix)
    assert frame["job_id"].tolist() == [f"d{i}" for i in range(1000)]  # soonest first
    assert frame.attrs["notes"] == [
        f"delayed ({keys.delayed}): counted the first 1,000 of 1,300 (opslib reads at most 1,000 per structure)"
    ]
    assert all(0 < n <= 100 for _, n in recording.reads), recording.reads
    assert opslib.delayed("send_email", client=recording, prefix=prefix).attrs["notes"] != []


def test_find_searches_the_first_entries_of_a_backlog_and_says_how_many_of_how_many(
    r: redis.Redis, keys: Keys, prefix: str, recording: Any, small_cap: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARCHIVE_URL", "off")
    fill(r, keys, waiting=1200, delayed=0)
    assert opslib.find("w999", client=recording, prefix=prefix)["where"].tolist() == ["waiting"]
    beyond = opslib.find("w1100", client=recording, prefix=prefix)
    assert beyond.empty
    assert (
        f"jobs ({keys.jobs}): searched the first 1,000 of 1,200 (opslib reads at most 1,000 per structure)"
        in beyond.attrs["notes"]
    )
    assert all(0 < n <= 100 for _, n in recording.reads), recording.reads


def test_moves_find_their_jobs_at_the_end_of_a_long_set_reading_a_page_a_command(
    r: redis.Redis, keys: Keys, prefix: str, recording: Any, small_cap: None
) -> None:
    """cancel, run_now and cancel_delayed look for given jobs in the whole of ``delayed`` (not capped: a move
    must find its job), a page a command; the jobs they look for are past the cap."""
    fill(r, keys, waiting=0, delayed=1500)
    assert opslib.run_now(["d1499"], client=recording, prefix=prefix)["status"].tolist() == ["queued"]
    assert opslib.cancel_delayed(["d1498"], reason="test", client=recording, prefix=prefix)["status"].tolist() == [
        "cancelled"
    ]
    assert opslib.cancel(["d1497"], reason="test", client=recording, prefix=prefix)["status"].tolist() == ["removed"]
    assert r.zcard(keys.delayed) == 1497
    scans = [n for what, n in recording.reads if what == "zscan"]
    assert scans and all(0 < n <= 100 for n in scans), recording.reads


def test_every_entry_reads_a_whole_log_a_page_a_command(
    r: redis.Redis, keys: Keys, recording: Any, small_cap: None
) -> None:
    """A replay's or discard's check of the dead letters' log (``moving``) reads all of it, a page a command."""
    for i in range(1250):
        r.xadd(keys.dead_log, {"event": "replayed", "dead_id": f"0-{i}"})
    assert len(list(bounded.every_entry(recording, keys.dead_log))) == 1250
    assert all(0 < n <= 100 for _, n in recording.reads), recording.reads
