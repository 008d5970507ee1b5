"""The archive partitioned by month, on the real PostgreSQL: migrate, conversion, ARCHIVE_RETENTION.

Each test has a schema of its own (``pg_url``) and thousands of rows, not
millions (benchmarks/archive_growth.py has those). ``python -m worker migrate``
makes ``dead_letters`` and ``operator_actions`` partitioned by month with the
coming months ready; an unpartitioned table as the previous release made it is
converted by the same call with every row kept; the ``archive-months`` chore
drops a whole month once every row of it is past retention, deletes the rest
in batches, never touches another queue's rows, and does it all under the
worker's DML-only role.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from benchmarks.archive_growth import PREVIOUS_DDL
from tests.queue.test_pg_roles import Roles, roles  # noqa: F401  (the fixture, with the documented grants)
from worker.archive.months import AHEAD_MONTHS, month_start, partition_name
from worker.archive.retention import Retention
from worker.archive.table import COLUMNS, migrate
from worker.errors import SettingsError
from worker.setting_parsers import retention
from worker.settings import Settings
from worker.store.keys import Keys

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
SEVEN_MONTHS_AGO = datetime(2026, 5, 10, tzinfo=UTC)
TWO_YEARS_AGO = datetime(2024, 11, 20, tzinfo=UTC)

ADD_ROWS = """
INSERT INTO dead_letters (queue, dead_id, dead_at, kind, status, fields)
SELECT %(queue)s, %(tag)s || '-' || i, %(at)s::timestamptz + i * interval '1 second', 'k', %(status)s,
       jsonb_build_array(jsonb_build_array('n', i::text))
FROM generate_series(1, %(n)s) AS i
"""
ADD_ACTIONS = """
INSERT INTO operator_actions (queue, id, at, action)
SELECT %(queue)s, %(tag)s || '-' || i, %(at)s::timestamptz + i * interval '1 second', 'replay'
FROM generate_series(1, %(n)s) AS i
"""


def add(conn: psycopg.Connection, at: datetime, status: str, n: int, queue: str = "q:") -> None:
    conn.execute(ADD_ROWS, {"queue": queue, "tag": f"{status}{at:%Y%m%d}{queue}", "at": at, "status": status, "n": n})


def partitions(conn: psycopg.Connection, table: str) -> list[str]:
    rows = conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = to_regclass(%s) ORDER BY 1",
        (table,),
    ).fetchall()
    return [name for (name,) in rows]


def counts(conn: psycopg.Connection) -> dict[tuple[str, str], int]:
    rows = conn.execute(
        "SELECT to_char(dead_at AT TIME ZONE 'UTC', 'YYYY-MM'), status, count(*) FROM dead_letters "
        "WHERE queue = 'q:' GROUP BY 1, 2"
    ).fetchall()
    return {(month, status): n for month, status, n in rows}


def prune(url: str, ages: str, now: datetime = NOW) -> Retention:
    chore = Retention(Settings.from_env({"QUEUE_PREFIX": "q:", "ARCHIVE_RETENTION": ages}), lambda: url)
    for _ in range(50):  # a run stops after BATCHES_PER_RUN batches and asks to run again at once
        if asyncio.run(chore.run(now)) is None:
            return chore
    raise AssertionError("retention still had batches after 50 runs")


def test_migrate_partitions_both_tables_by_month_with_the_coming_months_ready(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        migrate(conn)
        migrate(conn)  # again: nothing changes
        kinds = dict(
            conn.execute(
                "SELECT relname, relkind FROM pg_class WHERE relname IN ('dead_letters', 'operator_actions')"
            ).fetchall()
        )
        assert kinds == {"dead_letters": "p", "operator_actions": "p"}
        now = datetime.now(UTC)
        for table in ("dead_letters", "operator_actions"):
            ready = [partition_name(table, month_start(now, add)) for add in range(AHEAD_MONTHS + 1)]
            assert set(ready) | {f"{table}_default"} <= set(partitions(conn, table))
        indexes = {
            name for (name,) in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'dead_letters'")
        }
        assert {
            "dead_letters_dead_at",
            "dead_letters_kind_dead_at",
            "dead_letters_status_dead_at",
            "dead_letters_signature",
        } <= indexes
        # A row of a month with no partition yet lands in the default one; the next migrate moves it out.
        add(conn, TWO_YEARS_AGO, "dead", 5)
        assert conn.execute("SELECT count(*) FROM dead_letters_default").fetchone() == (5,)
        assert conn.execute("SELECT archive_ready_month('dead_letters', %s)", (TWO_YEARS_AGO,)).fetchone() == (True,)
        assert conn.execute("SELECT count(*) FROM dead_letters_default").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM dead_letters_p202411").fetchone() == (5,)


def test_an_unpartitioned_archive_is_converted_by_migrate_with_every_row_kept(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(PREVIOUS_DDL)
        for at, status, n in (
            (TWO_YEARS_AGO, "discarded", 700),
            (SEVEN_MONTHS_AGO, "replayed", 900),
            (NOW, "dead", 1400),
        ):
            add(conn, at, status, n)
        conn.execute(ADD_ACTIONS, {"queue": "q:", "tag": "a", "at": SEVEN_MONTHS_AGO, "n": 300})
        digest = "SELECT md5(string_agg(t::text, '|' ORDER BY dead_id)) FROM (SELECT {cols} FROM dead_letters) t"
        cols = ", ".join(c.name for c in COLUMNS)
        before = conn.execute(digest.format(cols=cols)).fetchone()

        migrate(conn)

        assert conn.execute(digest.format(cols=cols)).fetchone() == before
        assert conn.execute("SELECT relkind FROM pg_class WHERE relname = 'dead_letters'").fetchone() == ("p",)
        assert counts(conn) == {("2024-11", "discarded"): 700, ("2026-05", "replayed"): 900, ("2026-12", "dead"): 1400}
        assert conn.execute("SELECT count(*) FROM dead_letters_p202605").fetchone() == (900,)
        assert conn.execute("SELECT count(*) FROM dead_letters_default").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM operator_actions_p202605").fetchone() == (300,)
        assert conn.execute("SELECT to_regclass('dead_letters_unpartitioned')").fetchone() == (None,)
        # The archiver's insert still refuses a duplicate silently (the key holds dead_at, derived from the id).
        again = conn.execute(
            "INSERT INTO dead_letters (queue, dead_id, dead_at, fields) "
            "SELECT queue, dead_id, dead_at, fields FROM dead_letters LIMIT 1 ON CONFLICT DO NOTHING"
        )
        assert again.rowcount == 0


def test_retention_drops_whole_months_and_deletes_the_rest_in_batches(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        migrate(conn)
        for month in (TWO_YEARS_AGO, SEVEN_MONTHS_AGO):
            conn.execute("SELECT archive_ready_month('dead_letters', %s)", (month,))
            conn.execute("SELECT archive_ready_month('operator_actions', %s)", (month,))
        add(conn, TWO_YEARS_AGO, "dead", 1500)
        add(conn, TWO_YEARS_AGO, "replayed", 300)
        add(conn, SEVEN_MONTHS_AGO, "dead", 400)
        add(conn, SEVEN_MONTHS_AGO, "replayed", 2500)  # more than one batch
        add(conn, SEVEN_MONTHS_AGO, "discarded", 100)
        add(conn, NOW - timedelta(days=1), "replayed", 50)
        conn.execute(ADD_ACTIONS, {"queue": "q:", "tag": "old", "at": TWO_YEARS_AGO, "n": 20})
        conn.execute(ADD_ACTIONS, {"queue": "q:", "tag": "new", "at": NOW - timedelta(days=1), "n": 20})

    chore = prune(pg_url, "dead=365d,replayed=30d,discarded=30d,actions=90d")

    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert "dead_letters_p202411" not in partitions(conn, "dead_letters")
        assert "operator_actions_p202411" not in partitions(conn, "operator_actions")
        assert counts(conn) == {("2026-05", "dead"): 400, ("2026-12", "replayed"): 50}
        assert conn.execute("SELECT count(*) FROM operator_actions").fetchone() == (20,)
        # Dropped whole: both tables' 2024-11, and operator_actions' 2026-05 (empty, past 90 days); of the
        # kept months, only the rows past retention were deleted.
        assert "operator_actions_p202605" not in partitions(conn, "operator_actions")
        assert chore.deleted == 2600 and chore.dropped == 3


def test_retention_keeps_what_is_not_named_and_never_drops_another_queues_month(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        migrate(conn)
        conn.execute("SELECT archive_ready_month('dead_letters', %s)", (TWO_YEARS_AGO,))
        add(conn, TWO_YEARS_AGO, "dead", 30)
        add(conn, TWO_YEARS_AGO, "replayed", 40)
        add(conn, TWO_YEARS_AGO, "replayed", 60, queue="other:")

    prune(pg_url, "replayed=30d")  # dead rows: kept for ever

    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert counts(conn) == {("2024-11", "dead"): 30}
        assert conn.execute("SELECT count(*) FROM dead_letters WHERE queue = 'other:'").fetchone() == (60,)
        conn.execute("DELETE FROM dead_letters WHERE queue = 'q:' AND status = 'dead'")

    prune(pg_url, "dead=1d,replayed=30d")

    with psycopg.connect(pg_url, autocommit=True) as conn:  # the other queue's rows hold the month
        assert "dead_letters_p202411" in partitions(conn, "dead_letters")
        assert conn.execute("SELECT count(*) FROM dead_letters WHERE queue = 'other:'").fetchone() == (60,)


def test_each_named_queue_prunes_its_own_rows(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        migrate(conn)
        conn.execute("SELECT archive_ready_month('dead_letters', %s)", (TWO_YEARS_AGO,))
        add(conn, TWO_YEARS_AGO, "replayed", 40)
        add(conn, TWO_YEARS_AGO, "replayed", 60, queue="q:q:bulk:")  # the archive's queue: bulk's key prefix
    settings = Settings.from_env({"QUEUE_PREFIX": "q:", "ARCHIVE_RETENTION": "replayed=30d"})
    bulk = Retention(settings, lambda: pg_url, Keys("q:", queue="bulk"))
    assert bulk.chore().name == "archive-months (bulk)"
    while asyncio.run(bulk.run(NOW)) is not None:
        pass
    with psycopg.connect(pg_url, autocommit=True) as conn:
        left = dict(conn.execute("SELECT queue, count(*) FROM dead_letters GROUP BY 1").fetchall())
    assert left == {"q:": 40} and bulk.deleted == 60


def test_the_worker_role_makes_and_drops_months_only_through_the_migrations_functions(roles: Roles) -> None:  # noqa: F811
    with psycopg.connect(roles.migrator, autocommit=True) as conn:
        migrate(conn)
        conn.execute("SELECT archive_ready_month('dead_letters', %s)", (TWO_YEARS_AGO,))
        add(conn, TWO_YEARS_AGO, "dead", 10)
    for ddl in ("DROP TABLE dead_letters_p202411", "CREATE TABLE mine (x int)"):  # DML only
        with (
            psycopg.connect(roles.worker, autocommit=True) as conn,
            pytest.raises(psycopg.errors.InsufficientPrivilege),
        ):
            conn.execute(ddl)

    prune(roles.worker, "dead=365d", now=datetime.now(UTC) + timedelta(days=200))  # a month ahead made too

    with psycopg.connect(roles.analyst, autocommit=True) as conn:
        assert "dead_letters_p202411" not in partitions(conn, "dead_letters")
        ahead = partition_name("dead_letters", month_start(datetime.now(UTC) + timedelta(days=200), AHEAD_MONTHS))
        assert ahead in partitions(conn, "dead_letters")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="may not delete from dead_letters"):
            conn.execute("SELECT archive_drop_month('dead_letters', %s)", (NOW,))


@pytest.mark.parametrize(
    ("raw", "ages"),
    [
        ("", ()),
        ("dead=365d, replayed=30d,discarded=12h", (("dead", 31536000), ("replayed", 2592000), ("discarded", 43200))),
        ("actions=90m", (("actions", 5400),)),
    ],
)
def test_archive_retention_reads_status_age_pairs(raw: str, ages: tuple[tuple[str, int], ...]) -> None:
    assert retention("ARCHIVE_RETENTION", raw) == ages


@pytest.mark.parametrize("raw", ["dead=365", "dead=1y", "deleted=30d", "dead=1d,dead=2d", "30d"])
def test_a_bad_archive_retention_is_one_line_saying_what_would_be_right(raw: str) -> None:
    with pytest.raises(SettingsError) as caught:
        retention("ARCHIVE_RETENTION", raw)
    assert str(caught.value).startswith(f"ARCHIVE_RETENTION={raw!r}: ")
    assert "e.g. dead=365d,replayed=30d,discarded=30d" in str(caught.value) and "\n" not in str(caught.value)
