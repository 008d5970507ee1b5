"""The backlog gauge against the ground truth after each change a queue goes through, for one
partition's keys on any client (single server or cluster): shared by tests/queue and tests/cluster.

The ground truth reads everything (XRANGE of the whole stream, ZRANGE of the sets), as only a test
may; the gauge must give the same number without doing so."""

from __future__ import annotations

import json
import time
from typing import Any

from worker.observability.backlog import PartitionBacklog, read_backlog
from worker.store.keys import GROUP, Keys
from worker.store.scripts import Scripts
from worker.store.wire import text


def truth(client: Any, keys: Keys, now: float) -> tuple[int, int]:
    """(backlog, running) counted the slow way: entries after the group's last-delivered id, due
    delayed and throttled members (parked ones not), and the group's pending entries."""
    group = next(g for g in client.xinfo_groups(keys.jobs) if text(g["name"]) == GROUP)
    last = text(group["last-delivered-id"])
    undelivered = len(client.xrange(keys.jobs, min="(" + last, max="+"))
    due = len(client.zrange(keys.delayed, "-inf", now, byscore=True))
    throttled = len(client.zrange(keys.throttled, 0, -1))
    return undelivered + due + throttled, int(group["pending"])


def reading(client: Any, keys: Keys, now: float) -> PartitionBacklog:
    (found,) = read_backlog(client, [keys], now)
    return found


def check(client: Any, keys: Keys, step: str) -> PartitionBacklog:
    now = time.time()
    found = reading(client, keys, now)
    assert (found.backlog, found.running) == truth(client, keys, now), f"after {step}: {found}"
    assert found.exact, step
    return found


def redis_lag(client: Any, keys: Keys) -> Any:
    return next(g for g in client.xinfo_groups(keys.jobs) if text(g["name"]) == GROUP)["lag"]


def member(kind: str, job_id: str) -> str:
    return json.dumps({"attempts": "0", "job_id": job_id, "kind": kind}, sort_keys=True, separators=(",", ":"))


def run(client: Any, keys: Keys) -> None:
    """Every change the gauge must follow, checked after each one."""
    client.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
    assert check(client, keys, "an empty queue").backlog == 0
    ids = [client.xadd(keys.jobs, {"kind": "greet", "job_id": f"j{n}", "attempts": "0"}) for n in range(12)]
    assert check(client, keys, "12 entries added").backlog == 12
    delivered = client.xreadgroup(GROUP, "c1", {keys.jobs: ">"}, count=4)[0][1]
    client.xack(keys.jobs, GROUP, delivered[0][0], delivered[1][0])
    assert check(client, keys, "4 delivered, 2 acknowledged").running == 2
    client.xtrim(keys.jobs, maxlen=6, approximate=False)  # two undelivered ones go: lag still counts them
    assert check(client, keys, "XTRIM past the read position").backlog == 6
    assert redis_lag(client, keys) == 8
    client.xdel(keys.jobs, ids[8], ids[9])  # undelivered entries deleted: XINFO's lag turns NULL
    assert redis_lag(client, keys) is None
    found = check(client, keys, "XDEL of two undelivered entries")
    assert found.backlog == 4
    now = time.time()
    client.zadd(keys.delayed, {member("greet", "d-due"): now - 5, member("greet", "d-later"): now + 3600})
    assert check(client, keys, "delayed jobs, one due").backlog == found.backlog + 1
    client.zadd(keys.throttled, {member("greet", "t1"): now + 2, member("greet", "t2"): now + 30})
    assert check(client, keys, "two throttled jobs").backlog == found.backlog + 3
    pause(client, keys, "greet")
    after_pause = check(client, keys, "pause: the due delayed job and the undelivered entries parked")
    assert client.zcard(keys.parked) == 1 + found.undelivered
    assert after_pause.backlog == 2  # the throttled ones; parked work waits for resume, not for a worker
    client.delete(keys.throttled)
    for pending in client.xpending_range(keys.jobs, GROUP, min="-", max="+", count=100):
        client.xack(keys.jobs, GROUP, pending["message_id"])
    drained = check(client, keys, "everything acknowledged (a caught-up group)")
    assert (drained.backlog, drained.running) == (0, 0)


def pause(client: Any, keys: Keys, kind: str) -> None:
    """Pause ``kind`` as opslib does (its record in ``paused``), then what the workers would do:
    promote (which parks the paused kind's due delayed jobs) and park each delivered entry of it."""
    client.hset(keys.paused, kind, json.dumps({"since": "2026-12-02T00:00:00+00:00", "by": "t", "reason": "r"}))
    scripts = Scripts(client, keys)
    scripts.promote(time.time())
    for _stream, entries in client.xreadgroup(GROUP, "c2", {keys.jobs: ">"}, count=100):
        for entry_id, _fields in entries:
            scripts.park(text(entry_id), kind)
