"""The backlog gauge against the ground truth after each change a queue goes through, for one
partition's keys on any client (single server or cluster), on ``default`` or a named queue: shared by
tests/queue and tests/cluster.

The ground truth reads everything (XRANGE of the whole stream, ZRANGE of the sets), as only a test
may; the gauge must give the same number without doing so. Jobs with a fair key are in it from the
start: they wait in ``fair:queue`` (or on ``jobs`` once the feeder moved them), never parked."""

from __future__ import annotations

import json
import time
from typing import Any

from worker.observability.backlog import PartitionBacklog, read_backlog
from worker.store.fair import send_fair
from worker.store.keys import GROUP, Keys
from worker.store.scripts import Scripts
from worker.store.wire import text

#: The fair-key jobs' kind: never paused here, so they wait through the pause.
FAIR_KIND = "report"


def truth(client: Any, keys: Keys, now: float) -> tuple[int, int]:
    """(backlog, running) counted the slow way: entries after the group's last-delivered id, due
    delayed, throttled and fair-queue members (parked ones not), and the group's pending entries."""
    group = next(g for g in client.xinfo_groups(keys.jobs) if text(g["name"]) == GROUP)
    last = text(group["last-delivered-id"])
    undelivered = len(client.xrange(keys.jobs, min="(" + last, max="+"))
    due = len(client.zrange(keys.delayed, "-inf", now, byscore=True))
    throttled = len(client.zrange(keys.throttled, 0, -1))
    fair = len(client.zrange(keys.fair_queue, 0, -1))
    return undelivered + due + throttled + fair, int(group["pending"])


def reading(client: Any, keys: Keys, now: float) -> PartitionBacklog:
    (found,) = read_backlog(client, [keys], now)
    return found


def check(client: Any, keys: Keys, step: str) -> PartitionBacklog:
    now = time.time()
    found = reading(client, keys, now)
    assert (found.backlog, found.running) == truth(client, keys, now), f"after {step}: {found}"
    assert found.exact, step
    assert found.queue == keys.queue, step
    return found


def redis_lag(client: Any, keys: Keys) -> Any:
    return next(g for g in client.xinfo_groups(keys.jobs) if text(g["name"]) == GROUP)["lag"]


def member(kind: str, job_id: str) -> str:
    return json.dumps({"attempts": "0", "job_id": job_id, "kind": kind}, sort_keys=True, separators=(",", ":"))


def enqueue_fair(client: Any, keys: Keys, job_id: str, fair_key: str) -> None:
    """A job with a fair key, through the enqueue's own script (``fair_enqueue.lua``)."""
    send_fair(client, keys, {"kind": FAIR_KIND, "job_id": job_id, "attempts": "0", "fair_key": fair_key})


def run(client: Any, keys: Keys) -> None:
    """Every change the gauge must follow, checked after each one."""
    client.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
    assert check(client, keys, "an empty queue").backlog == 0
    ids = [client.xadd(keys.jobs, {"kind": "greet", "job_id": f"j{n}", "attempts": "0"}) for n in range(12)]
    assert check(client, keys, "12 entries added").backlog == 12
    for n, tenant in enumerate(["A", "A", "B"]):
        enqueue_fair(client, keys, f"f{n}", tenant)
    assert client.zcard(keys.fair_queue) == 3  # jobs holds waiting entries: the fair ones wait their turn
    assert check(client, keys, "3 fair-key jobs waiting").backlog == 15
    delivered = client.xreadgroup(GROUP, "c1", {keys.jobs: ">"}, count=4)[0][1]
    client.xack(keys.jobs, GROUP, delivered[0][0], delivered[1][0])
    assert check(client, keys, "4 delivered, 2 acknowledged").running == 2
    client.xtrim(keys.jobs, maxlen=6, approximate=False)  # two undelivered ones go: lag still counts them
    assert check(client, keys, "XTRIM past the read position").backlog == 6 + 3
    assert redis_lag(client, keys) == 8
    client.xdel(keys.jobs, ids[8], ids[9])  # undelivered entries deleted: XINFO's lag turns NULL
    assert redis_lag(client, keys) is None
    assert check(client, keys, "XDEL of two undelivered entries").backlog == 4 + 3
    moved, spilled, waiting = Scripts(client, keys).fair_dispatch(2, 500)  # the feeder, for 2 slots
    assert (int(moved), int(spilled), int(waiting)) == (0, 2, 5)  # 2 plain entries spilled under the key ""
    found = check(client, keys, "the fair feeder spilled entries into fair:queue (XDEL again)")
    assert found.backlog == 7 and found.fair == 5
    now = time.time()
    client.zadd(keys.delayed, {member("greet", "d-due"): now - 5, member("greet", "d-later"): now + 3600})
    assert check(client, keys, "delayed jobs, one due").backlog == 8
    client.zadd(keys.throttled, {member("greet", "t1"): now + 2, member("greet", "t2"): now + 30})
    assert check(client, keys, "two throttled jobs").backlog == 10
    pause(client, keys, "greet")
    after_pause = check(client, keys, "pause: the due delayed job and the undelivered greet entries parked")
    assert client.zcard(keys.parked) == 1 + 2  # the due delayed one, the two left on jobs
    assert after_pause.backlog == 2 + 5  # throttled and fair-queue ones; parked work waits for resume
    client.delete(keys.throttled)
    drain_fair(client, keys)
    for pending in client.xpending_range(keys.jobs, GROUP, min="-", max="+", count=100):
        client.xack(keys.jobs, GROUP, pending["message_id"])
    drained = check(client, keys, "everything acknowledged (a caught-up group, fair:queue empty)")
    assert (drained.backlog, drained.running) == (0, 0)


def pause(client: Any, keys: Keys, kind: str) -> None:
    """Pause ``kind`` as opslib does (its record in ``paused``), then what the workers would do:
    promote (which parks the paused kind's due delayed jobs) and park each delivered entry of it
    (another kind's delivered entry runs: it stays pending)."""
    client.hset(keys.paused, kind, json.dumps({"since": "2026-12-02T00:00:00+00:00", "by": "t", "reason": "r"}))
    scripts = Scripts(client, keys)
    scripts.promote(time.time())
    for _stream, entries in client.xreadgroup(GROUP, "c2", {keys.jobs: ">"}, count=100):
        for entry_id, fields in entries:
            if text(fields[b"kind"] if b"kind" in fields else fields["kind"]) == kind:
                scripts.park(text(entry_id), kind)


def drain_fair(client: Any, keys: Keys) -> None:
    """The feeder and a worker until ``fair:queue`` is empty: each dispatch is checked, each read acknowledged
    (a spilled entry of the paused kind is parked, as a worker would)."""
    scripts = Scripts(client, keys)
    for _round in range(20):
        _moved, _spilled, waiting = scripts.fair_dispatch(2, 500)
        check(client, keys, "a fair dispatch")
        for _stream, entries in client.xreadgroup(GROUP, "c3", {keys.jobs: ">"}, count=100) or []:
            for entry_id, fields in entries:
                kind = text(fields[b"kind"] if b"kind" in fields else fields["kind"])
                if client.hexists(keys.paused, kind):
                    scripts.park(text(entry_id), kind)
                else:
                    client.xack(keys.jobs, GROUP, entry_id)
        if not int(waiting) and not client.zcard(keys.fair_queue):
            return
    raise AssertionError(f"fair:queue not drained: {client.zcard(keys.fair_queue)} left")
