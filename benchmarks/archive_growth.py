"""The archive as it grows: converting an unpartitioned ``dead_letters`` by migrate, the readers, a month pruned.

    .venv/bin/python benchmarks/archive_growth.py [--rows 1000000] [--fill-partitioned]

In a schema of its own (dropped after) on ``DATABASE_URL`` (default: the
machine's PostgreSQL on 127.0.0.1:5432, database ``test``): the table as the
previous release made it (unpartitioned, :data:`PREVIOUS_DDL`) filled with
``--rows`` dead letters over the last 60 days (the rows of
``benchmarks/archive_reads.py``: 5 kinds, 2 KB tracebacks, a tenth replayed, a
twentieth discarded); then ``python -m worker migrate``'s conversion, timed;
one day of ``opslib.archive()``, 30 days of ``opslib.history()``; the
oldest month exported to Parquet and verified (``python -m opslib export``);
the ``archive-months`` chore with a retention that leaves that month wholly
past (the month is dropped), timed, and the dead tuples left in the kept
partitions. Prints one line per figure.

``--fill-partitioned`` (for 10M rows) skips the previous release's table and
its conversion (whose time per million the 1M run gives): ``migrate`` makes the
partitioned table first, with a partition for each month of the 60 days, and
the rows go into it by ``COPY ... FROM STDIN``, a million at a time, streamed
from a ``COPY (SELECT ...) TO STDOUT`` of the same rows on a second connection.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import opslib
from benchmarks.archive_reads import FILL, KINDS, TRACEBACK, own_schema
from opslib.export import export_month
from worker.archive.months import month_start
from worker.archive.retention import Retention
from worker.archive.table import COLUMNS, migrate
from worker.settings import Settings

DAYS = 60

#: ``dead_letters`` and ``operator_actions`` as the release before the partitioned archive made them.
PREVIOUS_DDL = (
    "CREATE TABLE dead_letters ("
    + ", ".join(f"{c.name} {c.sql}" for c in COLUMNS)
    + ", PRIMARY KEY (queue, partition, dead_id));"
    + "CREATE INDEX dead_letters_kind_dead_at ON dead_letters (queue, kind, dead_at);"
    + "CREATE INDEX dead_letters_dead_at ON dead_letters (queue, dead_at)"
    + " INCLUDE (kind, replayed_at, discarded_at, replay_outcome);"
    + "CREATE INDEX dead_letters_signature ON dead_letters (queue, signature);"
    + """CREATE TABLE operator_actions (queue text NOT NULL, id text NOT NULL, at timestamptz NOT NULL,
    by text NOT NULL DEFAULT '', action text NOT NULL, kind text NOT NULL DEFAULT '',
    entries integer NOT NULL DEFAULT 0, reason text NOT NULL DEFAULT '', batch text NOT NULL DEFAULT '',
    detail jsonb NOT NULL DEFAULT '{}', PRIMARY KEY (queue, id));
    CREATE INDEX operator_actions_at ON operator_actions (queue, at);"""
)

DEAD_TUPLES = """
SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables
WHERE schemaname = current_schema() AND relname LIKE 'dead_letters_p%'
"""


#: The rows of :data:`FILL` numbered ``first`` to ``last``, as a query for ``COPY (...) TO STDOUT``.
_SELECT = FILL[FILL.index("\nSELECT") :].replace("generate_series(1, %(rows)s)", "generate_series(%(first)s, %(last)s)")
_INSERTED = FILL[FILL.index("(") : FILL.index(")") + 1]
assert "%(first)s" in _SELECT and "dead_id" in _INSERTED, "FILL changed its shape"
COPY_CHUNK = 1_000_000


def copy_fill(url: str, params: dict[str, object]) -> None:
    """:data:`FILL`'s rows into the partitioned ``dead_letters`` by COPY, :data:`COPY_CHUNK` rows at a time,
    each streamed from PostgreSQL's own ``COPY (SELECT ...) TO STDOUT`` (text format) on a second connection."""
    rows = int(params["rows"])  # type: ignore[call-overload]
    with psycopg.connect(url, autocommit=True) as source, psycopg.connect(url, autocommit=True) as target:
        for first in range(1, rows + 1, COPY_CHUNK):
            chunk = {**params, "first": first, "last": min(rows, first + COPY_CHUNK - 1)}
            with (
                source.cursor().copy(f"COPY ({_SELECT}) TO STDOUT", chunk) as out,
                target.cursor().copy(f"COPY dead_letters {_INSERTED} FROM STDIN") as into,
            ):
                for data in out:
                    into.write(data)


def timed(label: str, call: object) -> object:
    started = time.perf_counter()
    result = call() if callable(call) else None
    print(f"{label}: {time.perf_counter() - started:.3f} s")
    return result


def run(database_url: str, rows: int, partitioned: bool) -> None:
    with own_schema(database_url) as url, psycopg.connect(url, autocommit=True) as conn:
        spacing = pd.Timedelta(days=DAYS).to_pytimedelta() / rows
        params = {"traceback": TRACEBACK, "spacing": spacing, "kinds": list(KINDS), "rows": rows}
        if partitioned:
            migrate(conn)
            now = datetime.now(UTC)
            for back in (-2, -1):  # the months of the 60 days before this one
                conn.execute("SELECT archive_ready_month('dead_letters', %s)", (month_start(now, back),))
            timed(f"fill {rows:,} rows, partitioned (COPY)", lambda: copy_fill(url, params))
        else:
            conn.execute(PREVIOUS_DDL)
            timed(f"fill {rows:,} rows, unpartitioned (INSERT ... SELECT)", lambda: conn.execute(FILL, params))
            conn.execute("VACUUM ANALYZE dead_letters")
            elapsed = time.perf_counter()
            migrate(conn)
            elapsed = time.perf_counter() - elapsed
            print(f"migrate, converting {rows:,} rows: {elapsed:.1f} s ({elapsed / rows * 1e6:.1f} s per million rows)")
        timed("VACUUM ANALYZE", lambda: conn.execute("VACUUM ANALYZE dead_letters"))
        size = conn.execute("SELECT pg_size_pretty(sum(pg_total_relation_size(inhrelid))) FROM pg_inherits "
                            "WHERE inhparent = 'dead_letters'::regclass").fetchone()  # fmt: skip
        print(f"  the table and its indexes: {size[0] if size else '?'}")
        day = timed("archive(since=1 day)", lambda: opslib.archive(since="1d", conn=conn, prefix=""))
        print(f"  rows: {len(day):,}")  # type: ignore[arg-type]
        timed(
            "history(freq='1h', since=30 days)",
            lambda: opslib.history(freq="1h", since="30d", conn=conn, prefix=""),
        )
        now = datetime.now(UTC)
        oldest = month_start(now, -2)  # the month the 60 days begin in, wholly past once the next one began
        with tempfile.TemporaryDirectory() as folder:
            manifest = timed(
                f"export {oldest:%Y-%m} to Parquet, verified",
                lambda: export_month(f"{oldest:%Y-%m}", folder, conn=conn, prefix=""),
            )
            size = (Path(folder) / manifest["file"]).stat().st_size  # type: ignore[index]
            print(f"  rows: {manifest['rows']:,}, {size / 1e6:.0f} MB")  # type: ignore[index]
        # The age that leaves the month wholly past and not one row of the next: the chore runs at the instant
        # ``at``, whole seconds after the month's end (an age of whole seconds), so its cut-off is that end.
        age_s = int((datetime.now(UTC) - month_start(oldest, 1)).total_seconds())
        at = month_start(oldest, 1) + timedelta(seconds=age_s)
        ages = ",".join(f"{status}={age_s}s" for status in ("dead", "replayed", "discarded"))
        chore = Retention(Settings.from_env({"QUEUE_PREFIX": "", "ARCHIVE_RETENTION": ages}), lambda: url)
        kept_before = conn.execute(
            "SELECT count(*) FROM dead_letters WHERE dead_at >= %s", (month_start(oldest, 1),)
        ).fetchone()
        timed(f"prune {oldest:%Y-%m} (archive-months chore, one run)", lambda: asyncio.run(chore.run(now=at)))
        kept_after = conn.execute("SELECT count(*) FROM dead_letters").fetchone()
        conn.execute("SELECT pg_stat_force_next_flush()")
        print(
            f"  partitions dropped {chore.dropped}, rows deleted in batches {chore.deleted}, rows kept "
            f"{kept_after[0] if kept_after else '?'} of {kept_before[0] if kept_before else '?'}, "
            f"dead tuples in the kept partitions {conn.execute(DEAD_TUPLES).fetchone()[0]}"  # type: ignore[index]
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument(
        "--fill-partitioned",
        action="store_true",
        help="fill the partitioned table by COPY (no conversion timed: for 10M rows)",
    )
    args = parser.parse_args()
    run(os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test"), args.rows, args.fill_partitioned)


if __name__ == "__main__":
    main()
