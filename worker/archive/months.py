"""The archive's tables partitioned by month: the SQL that makes, converts, extends and drops partitions.

``dead_letters`` is partitioned by month of ``dead_at`` and ``operator_actions``
by month of ``at`` (UTC months), so that retention drops a whole month at once
(milliseconds, no dead tuples) instead of deleting millions of rows, and a
reader of a few days touches one or two partitions. Partition names are
``<table>_pYYYYMM``; ``<table>_default`` catches a row of a month that has no
partition yet (a clock far off), and the next migrate, or the worker's
``archive-months`` chore, moves those rows into their month's partition.

Only the migrator runs DDL (``python -m worker migrate``, :data:`MIGRATION`).
Workers stay DML-only: the two things their chore needs, a partition ready
for the coming months and a month dropped once retention has passed, are
functions the migration creates as the migrator (``SECURITY DEFINER``) and
that do only that, for these two tables only, and only for a caller that may
already INSERT (to make a month) or DELETE (to drop one) the table's rows.

An existing unpartitioned table (as releases before this one made it) is
converted by the same migration, in its transaction: set aside under
``<table>_unpartitioned``, a partition made for each month it has rows in,
every row copied, the counts compared (a difference rolls everything back),
the old table dropped. The tables are locked meanwhile: dead entries wait in
``jobs:dead`` and the archive chore catches up after (docs/operations.md gives
the time per million rows).
"""

from __future__ import annotations

from datetime import UTC, datetime

AHEAD_MONTHS = 3
"""Partitions are kept ready for the current month and this many after it."""

#: Each partitioned table: the column whose month places a row.
MONTH_COLUMN = {"dead_letters": "dead_at", "operator_actions": "at"}


def partition_name(table: str, month: datetime) -> str:
    """The partition of ``table`` that holds ``month`` (``dead_letters_p202612``)."""
    return f"{table}_p{month:%Y%m}"


def month_start(at: datetime, add: int = 0) -> datetime:
    """The first instant (UTC) of the month of ``at``, moved ``add`` months on."""
    index = at.astimezone(UTC).year * 12 + at.astimezone(UTC).month - 1 + add
    return datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)


def months_ahead(now: datetime) -> list[datetime]:
    """The months whose partitions must be ready at ``now``: this one and :data:`AHEAD_MONTHS` after."""
    return [month_start(now, add) for add in range(AHEAD_MONTHS + 1)]


_COLUMN_OF = "CASE tbl " + " ".join(f"WHEN '{t}' THEN '{c}'" for t, c in MONTH_COLUMN.items()) + " END"

#: Functions of the migration. ``archive_ready_month`` and ``archive_drop_month`` run as their owner (the
#: migrator) for a caller that holds INSERT (resp. DELETE) on the table; ``archive_partition_by_month``
#: is the migration's own step and runs with the caller's rights.
FUNCTIONS = f"""
CREATE OR REPLACE FUNCTION archive_month_column(tbl text) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path FROM CURRENT AS $fn$
DECLARE
    col text := {_COLUMN_OF};
BEGIN
    IF col IS NULL THEN
        RAISE EXCEPTION '% is not a table of the archive; use one of: {", ".join(MONTH_COLUMN)}', tbl;
    END IF;
    RETURN col;
END $fn$;

CREATE OR REPLACE FUNCTION archive_ready_month(tbl text, month timestamptz) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $fn$
DECLARE
    col  text := archive_month_column(tbl);
    lo   timestamptz := date_trunc('month', month AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    hi   timestamptz := (date_trunc('month', month AT TIME ZONE 'UTC') + interval '1 month') AT TIME ZONE 'UTC';
    part text := tbl || '_p' || to_char(month AT TIME ZONE 'UTC', 'YYYYMM');
BEGIN
    IF NOT has_table_privilege(session_user, tbl, 'INSERT') THEN
        RAISE EXCEPTION insufficient_privilege USING MESSAGE = format('%s may not insert into %s', session_user, tbl);
    END IF;
    IF to_regclass(part) IS NOT NULL THEN
        RETURN false;
    END IF;
    -- The month's rows that reached the default partition move into the new one, then it is attached.
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part, tbl);
    EXECUTE format(
        'WITH moved AS (DELETE FROM %I WHERE %I >= $1 AND %I < $2 RETURNING *) INSERT INTO %I SELECT * FROM moved',
        tbl || '_default', col, col, part
    ) USING lo, hi;
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', tbl, part, lo, hi);
    RETURN true;
END $fn$;

CREATE OR REPLACE FUNCTION archive_drop_month(tbl text, month timestamptz) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $fn$
DECLARE
    part text := tbl || '_p' || to_char(month AT TIME ZONE 'UTC', 'YYYYMM');
BEGIN
    PERFORM archive_month_column(tbl);
    IF NOT has_table_privilege(session_user, tbl, 'DELETE') THEN
        RAISE EXCEPTION insufficient_privilege USING MESSAGE = format('%s may not delete from %s', session_user, tbl);
    END IF;
    IF to_regclass(part) IS NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('DROP TABLE %I', part);
    RETURN true;
END $fn$;

CREATE OR REPLACE FUNCTION archive_set_aside(tbl text) RETURNS boolean
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
DECLARE
    found record;
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = to_regclass(tbl)) IS DISTINCT FROM 'r' THEN
        RETURN false;
    END IF;
    EXECUTE format('ALTER TABLE %I RENAME TO %I', tbl, tbl || '_unpartitioned');
    FOR found IN SELECT conname FROM pg_constraint WHERE conrelid = to_regclass(tbl || '_unpartitioned')
                 AND contype IN ('p', 'u') LOOP
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', tbl || '_unpartitioned', found.conname);
    END LOOP;
    FOR found IN SELECT indexrelid::regclass::text AS name FROM pg_index
                 WHERE indrelid = to_regclass(tbl || '_unpartitioned') LOOP
        EXECUTE format('DROP INDEX %s', found.name);
    END LOOP;
    RETURN true;
END $fn$;

CREATE OR REPLACE FUNCTION archive_fill(tbl text) RETURNS bigint
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
DECLARE
    col     text := archive_month_column(tbl);
    old     text := tbl || '_unpartitioned';
    names   text;
    month   timestamptz;
    had     bigint;
    copied  bigint;
BEGIN
    IF to_regclass(old) IS NULL THEN
        RETURN 0;
    END IF;
    FOR month IN EXECUTE format(
        'SELECT DISTINCT date_trunc(''month'', %I AT TIME ZONE ''UTC'') AT TIME ZONE ''UTC'' FROM %I', col, old
    ) LOOP
        PERFORM archive_ready_month(tbl, month);
    END LOOP;
    SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO names FROM pg_attribute
    WHERE attrelid = to_regclass(old) AND attnum > 0 AND NOT attisdropped;
    EXECUTE format('SELECT count(*) FROM %I', old) INTO had;
    EXECUTE format('INSERT INTO %I (%s) SELECT %s FROM %I', tbl, names, names, old);
    GET DIAGNOSTICS copied = ROW_COUNT;
    IF copied <> had THEN
        RAISE EXCEPTION '% rows of % copied into the partitioned %, not %: nothing changed', copied, old, tbl, had;
    END IF;
    EXECUTE format('DROP TABLE %I', old);
    RETURN copied;
END $fn$;
"""


def ready_statements(now: datetime) -> list[tuple[str, tuple[str, datetime]]]:
    """The calls that make every table's partitions of the coming months (:func:`months_ahead`)."""
    return [
        ("SELECT archive_ready_month(%s, %s)", (table, month)) for table in MONTH_COLUMN for month in months_ahead(now)
    ]
