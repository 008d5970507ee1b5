"""What the benchmarks and the tests both need, kept here so that benchmarks import no test code.

Dead letters buried by the thousand through the bury script (exactly as the
worker buries them, far faster than running a worker), and a PostgreSQL URL
whose connections use one schema (a run's or a test's tables apart from the
rest of the database), and the figures of a throttle (the start rate and the busiest second).
"""

from __future__ import annotations

import bisect
from urllib.parse import quote

import redis

from worker.store.keys import GROUP, Keys
from worker.store.scripts import Scripts


def with_schema(url: str, schema: str) -> str:
    """``url`` with ``search_path`` set to ``schema`` for every connection."""
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options={quote(f'-csearch_path={schema}')}"


def ensure_group(r: redis.Redis, keys: Keys) -> None:
    try:
        r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


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


def rate_and_peak(started: list[float]) -> tuple[float, int]:
    """The start rate of sorted start times (starts after the first over the time they took) and the most
    starts in any one-second window [t, t + 1) opened at a start."""
    if len(started) < 2:
        return 0.0, len(started)
    rate = (len(started) - 1) / (started[-1] - started[0])
    peak = max(bisect.bisect_left(started, t + 1.0) - n for n, t in enumerate(started))
    return rate, peak
