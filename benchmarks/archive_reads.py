"""The speed of reading the dead-letter archive: ``archive(kind=..., since=...)`` and ``history(freq="1h")``
over 1,000,000 archived rows (part of ``benchmarks/opslib_bench.py``).

The rows are made by one ``INSERT ... SELECT FROM generate_series`` in a
schema of the benchmark's own (dropped afterwards), in the table
``worker.archive.table.migrate`` creates with its indexes: 30 days of dead
letters of 5 kinds, one every 2.6 s, each with a 2 KB traceback that varies
by row; one in ten replayed an hour after it died (nine in ten of those
succeeded), one in twenty discarded two hours after. ``archive()`` then asks
for one kind over the last day (about 6,700 rows, tracebacks included);
``history()`` counts the whole million per hour and kind.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pandas as pd
import psycopg

import opslib
from worker.archive.table import migrate

ROWS = 1_000_000
DAYS = 30
KINDS = ("render_tickets", "send_email", "send_reminder", "capture_payment", "expire_holds")
TARGETS_S = {"archive(kind, since=1 day)": 1.0, 'history(freq="1h")': 1.0}

#: A traceback of about 2 KB, as the worker bounds them, with the row's number in its frames and message.
TRACEBACK = (
    "Traceback (most recent call last):\n"
    + "".join(
        f'  File "/app/.venv/lib/python3.11/site-packages/{module}.py", line {line}, in {function}\n    {statement}\n'
        for module, line, function, statement in [
            ("worker/outcomes", 118, "run_handler", "result = await handler(job)"),
            ("stagedoor/handlers/tickets", 64, "render_tickets", "pdf = render_pdf(order, seats)"),
            ("stagedoor/ticket_pdf", 88, "render_pdf", "page.draw_barcode(barcode_value(seat))"),
            ("reportlab/graphics/barcode/code128", 212, "__init__", "self.validate()"),
            ("stagedoor/ticket_pdf", 41, "barcode_value", "raise SeatLabelInvalid(label)"),
        ]
        * 3
    )
    + "stagedoor.errors.SeatLabelInvalid: '{n}-C' is not a row letter and a seat number (order {n})\n"
)

FILL = """
INSERT INTO dead_letters (queue, dead_id, dead_at, kind, job_id, attempts, reason, error_type, error, signature,
                          traceback, worker, fields, status, replayed_at, replay_batch, replay_new_id,
                          replay_outcome, discarded_at, discarded_by, discard_reason)
SELECT '', (extract(epoch FROM t) * 1000)::bigint || '-' || i, t, kind, 'job-' || i, 2, 'exhausted',
       'SeatLabelInvalid', error, 'SeatLabelInvalid: <str> is not a row letter and a seat number',
       replace(%(traceback)s, '{n}', i::text), 'worker-' || (i %% 4),
       jsonb_build_array(jsonb_build_array('kind', kind), jsonb_build_array('job_id', 'job-' || i),
                         jsonb_build_array('attempts', '2'), jsonb_build_array('order_id', i::text),
                         jsonb_build_array('error', error), jsonb_build_array('reason', 'exhausted')),
       CASE WHEN i %% 10 = 0 THEN 'replayed' WHEN i %% 20 = 1 THEN 'discarded' ELSE 'dead' END,
       CASE WHEN i %% 10 = 0 THEN t + interval '1 hour' END,
       CASE WHEN i %% 10 = 0 THEN 'batch-' || (i / 1000) END,
       CASE WHEN i %% 10 = 0 THEN (extract(epoch FROM t) * 1000)::bigint + 3600000 || '-0' END,
       CASE WHEN i %% 100 = 0 THEN 'failed again' WHEN i %% 10 = 0 THEN 'succeeded' END,
       CASE WHEN i %% 20 = 1 THEN t + interval '2 hours' END,
       CASE WHEN i %% 20 = 1 THEN 'bench' END,
       CASE WHEN i %% 20 = 1 THEN 'order refunded' END
FROM (
    SELECT i, now() - (i * %(spacing)s) AS t, (%(kinds)s::text[])[1 + i %% 5] AS kind,
           'SeatLabelInvalid: ''' || i || '-C'' is not a row letter and a seat number' AS error
    FROM generate_series(1, %(rows)s) AS i
) AS rows
"""


@contextmanager
def own_schema(database_url: str) -> Iterator[str]:
    """A new schema of the benchmark's own; yields a URL whose search path it is, drops it after."""
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    url = f"{database_url}{'&' if '?' in database_url else '?'}options=-csearch_path%3D{schema}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield url
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@contextmanager
def archive_schema(database_url: str) -> Iterator[str]:
    """A schema of the benchmark's own holding ``ROWS`` archived dead letters; yields its URL, drops it after."""
    with own_schema(database_url) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            migrate(conn)
            started = time.perf_counter()
            conn.execute(
                FILL,
                {
                    "traceback": TRACEBACK,
                    "spacing": pd.Timedelta(days=DAYS).to_pytimedelta() / ROWS,
                    "kinds": list(KINDS),
                    "rows": ROWS,
                },
            )
            conn.execute("VACUUM ANALYZE dead_letters")
            size = conn.execute("SELECT pg_size_pretty(pg_total_relation_size('dead_letters'))").fetchone()
            print(f"archived {ROWS:,} rows in {time.perf_counter() - started:.1f} s ({size[0] if size else '?'})")
        yield url


def measure_archive_reads(
    database_url: str, rounds: int, timed: Callable[[str, Callable[[], object]], tuple[float, object]]
) -> dict[str, list[float]]:
    """Seconds per call of each read in :data:`TARGETS_S`, ``rounds`` times, on a fresh archive of ``ROWS``."""
    times: dict[str, list[float]] = {name: [] for name in TARGETS_S}
    with archive_schema(database_url) as url, psycopg.connect(url, autocommit=True) as conn:
        for _ in range(rounds):
            elapsed, frame = timed(
                "archive(kind, since=1 day)",
                lambda: opslib.archive("render_tickets", since=pd.Timedelta("1D"), conn=conn, prefix=""),
            )
            times["archive(kind, since=1 day)"].append(elapsed)
            assert 6_000 < len(frame) < 7_500, len(frame)  # type: ignore[arg-type]
            elapsed, frame = timed('history(freq="1h")', lambda: opslib.history(freq="1h", conn=conn, prefix=""))
            times['history(freq="1h")'].append(elapsed)
            assert frame["died"].sum() == ROWS, frame["died"].sum()  # type: ignore[index]
    return times
