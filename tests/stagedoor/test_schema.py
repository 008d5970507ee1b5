"""The schema: created in the connection's own schema, idempotent, safe to run concurrently."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import psycopg

from stagedoor.schema import TABLE_NAMES, migrate_url
from tests.helpers import ROOT


def tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        ).fetchall()
    return {name for (name,) in rows}


def test_migrate_twice_creates_every_table_in_the_current_schema(pg_url: str) -> None:
    migrate_url(pg_url)
    migrate_url(pg_url)
    assert tables(pg_url) == set(TABLE_NAMES)


def test_workers_migrating_at_once_do_not_race(pg_url: str) -> None:
    errors: list[BaseException] = []

    def migrate() -> None:
        try:
            migrate_url(pg_url)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=migrate) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert tables(pg_url) == set(TABLE_NAMES)


def test_python_m_stagedoor_migrate(pg_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "stagedoor", "migrate"],
        env={**os.environ, "DATABASE_URL": pg_url, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "migrated"), done.stderr
    assert tables(pg_url) == set(TABLE_NAMES)
