"""Dead letters for the opslib tests (and the benchmark): from real worker runs, or buried
directly by the bury script, exactly as the worker buries them."""

from __future__ import annotations

import redis

from tests.helpers import Workers
from worker.store.enqueue import enqueue
from worker.store.keys import GROUP, Keys
from worker.store.scripts import Scripts

KINDS = "tests.opslib.kinds_opslib"
BAD_LABELS = ("14-C", "7-A", "3-B")


def seat_dead_letters(r: redis.Redis, keys: Keys, workers: Workers, labels: tuple[str, ...] = BAD_LABELS) -> list[str]:
    """Run ``seat_label`` jobs with these labels through a burst worker; return the dead ids."""
    for number, label in enumerate(labels):
        enqueue(r, "seat_label", {"seat": label, "order_id": str(4471 + number)}, prefix=keys.prefix)
    workers.burst(KINDS)
    return [entry_id.decode() for entry_id, _ in r.xrange(keys.dead)]


def ensure_group(r: redis.Redis, keys: Keys) -> None:
    try:
        r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def bury(r: redis.Redis, keys: Keys, fields: dict[str, str], error: dict[str, str]) -> str:
    """Put one job straight into ``jobs:dead`` through the bury script; return its dead id."""
    ensure_group(r, keys)
    entry_id = r.xadd(keys.jobs, fields).decode()
    r.xreadgroup(GROUP, "seeder", {keys.jobs: ">"}, count=1)
    return Scripts(r, keys).bury(entry_id, error, maxlen=100_000).decode()


def buried_many(
    r: redis.Redis, keys: Keys, count: int, *, kind: str = "seat_label", traceback_bytes: int = 40
) -> list[str]:
    """``count`` dead ``kind`` letters with bad seat labels, buried in pipelines (thousands in a second)."""
    ensure_group(r, keys)
    trace = ("Traceback (most recent call last):\n" + "  File render.py, line 88, in barcode_for\n" * 100)[
        :traceback_bytes
    ]
    for start in range(0, count, 1000):
        pipe = r.pipeline(transaction=False)
        for number in range(start, min(count, start + 1000)):
            fields = {"kind": kind, "job_id": f"job{number}", "attempts": "0", "seat": f"{number}-C"}
            pipe.xadd(keys.jobs, fields)
        pipe.execute()
    dead_ids: list[str] = []
    scripts = Scripts(r, keys)
    while True:
        reply = r.xreadgroup(GROUP, "seeder", {keys.jobs: ">"}, count=1000)
        if not reply:
            return dead_ids
        pipe = r.pipeline(transaction=False)
        for entry_id, fields in reply[0][1]:
            seat = fields[b"seat"].decode()
            error = {
                "attempts": "2",
                "error": f"SeatLabelInvalid: {seat!r} is not a row letter and a seat number",
                "traceback": trace,
                "reason": "exhausted",
                "failed_at": "2026-11-30T21:14:00.000Z",
                "worker": "seeder",
            }
            scripts.bury(entry_id.decode(), error, maxlen=100_000, client=pipe)
        dead_ids += [dead_id.decode() for dead_id in pipe.execute()]
