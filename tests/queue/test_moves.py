"""The atomic moves (Lua scripts) against a real server: no duplicate, no loss."""

from __future__ import annotations

import threading
import time

import redis

from worker.store.enqueue import enqueue
from worker.store.keys import ARCHIVE_GROUP, GROUP, Keys
from worker.store.scripts import NAMES, Scripts, source
from worker.store.wire import decode_member, encode_member


def make_group(r: redis.Redis, keys: Keys) -> None:
    r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)


def test_promote_moves_only_due_members_in_batches(r: redis.Redis, keys: Keys) -> None:
    scripts = Scripts(r, keys)
    now = time.time()
    for i in range(250):
        r.zadd(keys.delayed, {encode_member({"kind": "noop", "job_id": f"due{i}", "attempts": "1"}): now - 1})
    r.zadd(keys.delayed, {encode_member({"kind": "noop", "job_id": "later", "attempts": "0"}): now + 3600})
    moved = [scripts.promote(now, 100) for _ in range(4)]
    assert moved == [100, 100, 50, 0]
    entries = r.xrange(keys.jobs)
    assert len(entries) == 250
    assert {f[b"job_id"] for _, f in entries} == {f"due{i}".encode() for i in range(250)}
    assert all(f[b"attempts"] == b"1" for _, f in entries)
    assert [decode_member(m)["job_id"] for m in r.zrange(keys.delayed, 0, -1)] == ["later"]


def test_two_promoters_at_once_never_duplicate(redis_url: str, keys: Keys) -> None:
    r = redis.Redis.from_url(redis_url)
    now = time.time()
    members = {encode_member({"kind": "noop", "job_id": f"j{i}", "attempts": "0"}): now - 1 for i in range(3000)}
    r.zadd(keys.delayed, members)

    def promoter() -> None:
        client = redis.Redis.from_url(redis_url)
        scripts = Scripts(client, keys)
        while scripts.promote(time.time(), 100):
            pass

    threads = [threading.Thread(target=promoter) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    ids = [f[b"job_id"] for _, f in r.xrange(keys.jobs)]
    assert len(ids) == 3000
    assert len(set(ids)) == 3000
    assert r.zcard(keys.delayed) == 0


def test_promote_turns_a_broken_member_into_an_entry_the_worker_dead_letters(r: redis.Redis, keys: Keys) -> None:
    r.zadd(keys.delayed, {"not json": time.time() - 1})
    assert Scripts(r, keys).promote(time.time(), 100) == 1
    [(_, fields)] = r.xrange(keys.jobs)
    assert fields == {b"malformed_delayed": b"not json"}


def test_retry_acknowledges_and_delays_in_one_move(r: redis.Redis, keys: Keys) -> None:
    scripts = Scripts(r, keys)
    make_group(r, keys)
    entry = enqueue(r, "email", {"to": "a@b.c"}, prefix=keys.prefix)
    r.xreadgroup(GROUP, "w1", {keys.jobs: ">"})
    member = encode_member({"kind": "email", "to": "a@b.c", "attempts": "1"})
    assert scripts.retry(entry, 123.0, member) == 1
    assert r.xpending(keys.jobs, GROUP)["pending"] == 0
    assert r.zrange(keys.delayed, 0, -1, withscores=True) == [(member.encode(), 123.0)]
    # a second retry of the same (now acknowledged) entry adds nothing
    assert scripts.retry(entry, 456.0, member.replace("1", "2")) == 0
    assert r.zcard(keys.delayed) == 1


def test_bury_keeps_the_original_fields_byte_for_byte_and_acks(r: redis.Redis, keys: Keys) -> None:
    scripts = Scripts(r, keys)
    make_group(r, keys)
    entry = r.xadd(
        keys.jobs, {b"kind": b"render_tickets", b"order_id": b"4471", b"blob": b"\xff\x00", b"attempts": b"1"}
    )
    r.xreadgroup(GROUP, "w1", {keys.jobs: ">"})
    dead_id = scripts.bury(entry.decode(), {"attempts": "2", "error": "E: x", "reason": "exhausted"}, maxlen=100)
    [(got_id, fields)] = r.xrange(keys.dead)
    assert got_id == dead_id
    assert fields == {
        b"kind": b"render_tickets",
        b"order_id": b"4471",
        b"blob": b"\xff\x00",
        b"attempts": b"2",
        b"error": b"E: x",
        b"reason": b"exhausted",
    }
    assert r.xpending(keys.jobs, GROUP)["pending"] == 0
    assert r.xlen(keys.jobs) == 0
    # burying again finds nothing pending and does nothing
    assert scripts.bury(entry.decode(), {"error": "again"}, maxlen=100) is None
    assert r.xlen(keys.dead) == 1


def test_bury_with_idle_check_skips_an_entry_claimed_since(r: redis.Redis, keys: Keys) -> None:
    scripts = Scripts(r, keys)
    make_group(r, keys)
    entry = r.xadd(keys.jobs, {"kind": "noop"}).decode()
    r.xreadgroup(GROUP, "w1", {keys.jobs: ">"})
    assert scripts.bury(entry, {"reason": "poison"}, maxlen=100, min_idle_ms=60_000) is None
    assert r.xpending(keys.jobs, GROUP)["pending"] == 1


def test_dead_cap_counts_every_evicted_entry(r: redis.Redis, keys: Keys) -> None:
    scripts = Scripts(r, keys)
    make_group(r, keys)
    total = 450
    ids = [r.xadd(keys.jobs, {"kind": "noop", "n": str(i)}).decode() for i in range(total)]
    r.xreadgroup(GROUP, "w1", {keys.jobs: ">"}, count=total)
    for entry in ids:
        scripts.bury(entry, {"reason": "exhausted"}, maxlen=100)
    length = r.xlen(keys.dead)
    evicted = int(r.get(keys.dead_evicted) or 0)
    assert evicted > 0
    assert length >= 100
    assert evicted + length == total


def test_replay_moves_each_dead_entry_back_once(r: redis.Redis, keys: Keys) -> None:
    scripts = Scripts(r, keys)
    dead_id = r.xadd(
        keys.dead, {"kind": "render_tickets", "order_id": "9", "attempts": "2", "error": "E", "traceback": "tb"}
    ).decode()
    at = "2026-11-30T21:14:00.000Z"
    new_id = scripts.replay(
        dead_id, "batch1", ["error", "traceback", "reason", "failed_at", "worker"], at=at, record=True
    )
    assert scripts.replay(dead_id, "batch2", ["error"], at=at, record=True) is None
    assert scripts.discard(dead_id, "batch3", by="ana", reason="late", at=at, record=True) == 0
    [(got, fields)] = r.xrange(keys.jobs)
    assert got == new_id
    assert fields == {
        b"kind": b"render_tickets",
        b"order_id": b"9",
        b"attempts": b"0",
        b"replay_of": dead_id.encode(),
        b"replay_batch": b"batch1",
        b"replays": b"1",
    }
    assert r.xlen(keys.dead) == 0
    # one record of the move, carrying the entry as it was (for the archive)
    [(_, record)] = r.xrange(keys.dead_log)
    assert record == {
        b"event": b"replayed",
        b"dead_id": dead_id.encode(),
        b"batch": b"batch1",
        b"new_id": new_id,
        b"at": at.encode(),
        b"by": b"",
        b"f.kind": b"render_tickets",
        b"f.order_id": b"9",
        b"f.attempts": b"2",
        b"f.error": b"E",
        b"f.traceback": b"tb",
    }


def test_discard_deletes_a_dead_entry_once_and_records_who_and_why(r: redis.Redis, keys: Keys) -> None:
    scripts = Scripts(r, keys)
    dead_id = r.xadd(keys.dead, {b"kind": b"mail", b"blob": b"\xff\x00"}).decode()
    other = r.xadd(keys.dead, {"kind": "mail"}).decode()
    at = "2026-11-30T21:14:00.000Z"
    assert scripts.discard(dead_id, "b1", by="ana", reason="refunded", at=at, record=True) == 1
    assert scripts.discard(dead_id, "b2", by="bob", reason="again", at=at, record=True) == 0
    assert scripts.replay(dead_id, "b3", [], at=at, record=True) is None
    assert [e.decode() for e, _ in r.xrange(keys.dead)] == [other]
    [(_, record)] = r.xrange(keys.dead_log)
    assert record == {
        b"event": b"discarded",
        b"dead_id": dead_id.encode(),
        b"batch": b"b1",
        b"by": b"ana",
        b"reason": b"refunded",
        b"at": at.encode(),
        b"f.kind": b"mail",
        b"f.blob": b"\xff\x00",
    }
    # without the archive (ARCHIVE_URL=off) nothing is recorded
    assert scripts.discard(other, "b4", by="ana", reason="x", at=at, record=False) == 1
    assert r.xlen(keys.dead_log) == 1


def test_trim_never_removes_undelivered_or_pending_entries(r: redis.Redis, keys: Keys) -> None:
    scripts = Scripts(r, keys)
    make_group(r, keys)
    ids = [r.xadd(keys.jobs, {"kind": "noop", "n": str(i)}).decode() for i in range(100)]
    r.xreadgroup(GROUP, "w1", {keys.jobs: ">"}, count=60)  # 0..59 delivered, 60..99 undelivered
    keep_pending = {ids[10], ids[35]}
    r.xack(keys.jobs, GROUP, *[i for i in ids[:60] if i not in keep_pending])
    removed = scripts.trim()
    assert removed == 10  # everything older than the oldest pending entry
    remaining = {eid.decode() for eid, _ in r.xrange(keys.jobs)}
    assert keep_pending <= remaining
    assert set(ids[60:]) <= remaining
    # once the pending entries are acknowledged, everything delivered goes
    r.xack(keys.jobs, GROUP, *keep_pending)
    scripts.trim()
    assert {eid.decode() for eid, _ in r.xrange(keys.jobs)} == set(ids[60:])


def test_refresh_claims_resets_idle_only_for_the_owner(r: redis.Redis, keys: Keys) -> None:
    scripts = Scripts(r, keys)
    make_group(r, keys)
    mine = r.xadd(keys.jobs, {"kind": "noop"}).decode()
    theirs = r.xadd(keys.jobs, {"kind": "noop"}).decode()
    r.xreadgroup(GROUP, "me", {keys.jobs: ">"}, count=1)
    r.xreadgroup(GROUP, "other", {keys.jobs: ">"}, count=1)
    # age both entries by 5 s (XCLAIM IDLE keeps the owner and sets the idle time)
    r.xclaim(keys.jobs, GROUP, "me", 0, [mine], idle=5000, justid=True)
    r.xclaim(keys.jobs, GROUP, "other", 0, [theirs], idle=5000, justid=True)
    assert scripts.refresh_claims("me", [mine, theirs]) == 1
    pending = {p["message_id"].decode(): p for p in r.xpending_range(keys.jobs, GROUP, "-", "+", 10)}
    assert pending[mine]["time_since_delivered"] < 1000 <= 5000 <= pending[theirs]["time_since_delivered"]
    assert pending[mine]["times_delivered"] == 1  # a refresh is not a delivery
    assert pending[theirs]["consumer"] == b"other"


def test_forget_consumers_removes_only_dead_consumers_that_own_nothing(r: redis.Redis, keys: Keys) -> None:
    scripts = Scripts(r, keys)
    make_group(r, keys)
    for name in ("dead-with-work", "dead-idle", "alive-idle"):
        r.xadd(keys.jobs, {"kind": "noop"})
        [[_, [(entry_id, _)]]] = r.xreadgroup(GROUP, name, {keys.jobs: ">"}, count=1)
        if name != "dead-with-work":
            r.xack(keys.jobs, GROUP, entry_id)
    # The caller names the consumers whose heartbeat is gone (alive-idle has one).
    assert sorted(scripts.forget_consumers(0, ["dead-with-work", "dead-idle"])) == [b"dead-idle"]
    names = {c["name"] for c in r.xinfo_consumers(keys.jobs, GROUP)}
    assert names == {b"dead-with-work", b"alive-idle"}
    assert r.xpending(keys.jobs, GROUP)["pending"] == 1


def test_forget_consumers_cleans_the_archive_group_on_the_dead_stream_too(r: redis.Redis, keys: Keys) -> None:
    scripts = Scripts(r, keys)
    r.xadd(keys.dead, {"kind": "noop"})
    r.xgroup_create(keys.dead, ARCHIVE_GROUP, id="0")
    [[_, [(entry_id, _)]]] = r.xreadgroup(ARCHIVE_GROUP, "gone", {keys.dead: ">"}, count=1)
    r.xack(keys.dead, ARCHIVE_GROUP, entry_id)
    assert scripts.forget_consumers(0, ["gone"], stream=keys.dead, group=ARCHIVE_GROUP) == [b"gone"]
    assert r.xinfo_consumers(keys.dead, ARCHIVE_GROUP) == []


def test_every_script_loads_with_its_includes_in_place_and_its_lua_line_first() -> None:
    for name in NAMES:
        text = source(name)
        assert text.split("\n", 1)[0].split(" ")[0] == "#!lua", name  # the server polices undeclared keys
        assert "KEYS[1]" in text.split("]]", 1)[0], f"{name}: the header declares its KEYS"
        assert "@include" not in text, name
    assert "local function delayed_entry" in source("promote") and "local function delayed_entry" in source("run_now")
    assert "local function group_frontier" in source("trim") and "local function group_frontier" in source("trim_dead")
