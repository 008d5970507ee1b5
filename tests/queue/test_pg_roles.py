"""PostgreSQL roles with exactly the documented grants: DDL only in the migrate commands.

A schema of the test's own and three roles made by the recipe of
docs/operations.md ("Roles"): the migrator creates the tables, the worker has
DML on them, the analyst SELECT. A worker under the worker role refuses to
start on a schema not yet migrated, naming the command that migrates it (and,
told to migrate itself, says its role may not); after `python -m worker
migrate` as the migrator it archives dead letters and applies a replay's
record; opslib under the analyst role reads the archive and is refused a
write in one line. Stagedoor's schema is checked the same way.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
import redis

import opslib
from stagedoor.schema import check_url
from stagedoor.schema import migrate_url as migrate_stagedoor
from tests.faults.helpers import KINDS
from tests.helpers import Workers, with_schema
from worker.archive.schema_check import NotMigrated
from worker.store.enqueue import enqueue
from worker.store.keys import Keys

#: The grants of docs/operations.md, for a schema and three role names (made LOGIN here; PASSWORD in prod).
GRANTS = """
CREATE ROLE {migrator} LOGIN;
CREATE ROLE {worker} LOGIN;
CREATE ROLE {analyst} LOGIN;
GRANT USAGE, CREATE ON SCHEMA {schema} TO {migrator};
GRANT USAGE ON SCHEMA {schema} TO {worker}, {analyst};
ALTER DEFAULT PRIVILEGES FOR ROLE {migrator} IN SCHEMA {schema}
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {worker};
ALTER DEFAULT PRIVILEGES FOR ROLE {migrator} IN SCHEMA {schema}
    GRANT USAGE, SELECT ON SEQUENCES TO {worker};
ALTER DEFAULT PRIVILEGES FOR ROLE {migrator} IN SCHEMA {schema}
    GRANT SELECT ON TABLES TO {analyst};
"""


@dataclass(frozen=True)
class Roles:
    """The URL of each role, with the test's schema as its search path."""

    migrator: str
    worker: str
    analyst: str


def as_role(url: str, role: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{role}@{parts.netloc.rpartition('@')[2]}"))


@pytest.fixture
def roles(database_url: str) -> Iterator[Roles]:
    tag = uuid.uuid4().hex[:8]
    schema = f"roles_{tag}"
    names = {"migrator": f"t_migrator_{tag}", "worker": f"t_worker_{tag}", "analyst": f"t_analyst_{tag}"}
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(GRANTS.format(schema=schema, **names))
    try:
        yield Roles(**{role: with_schema(as_role(database_url, name), schema) for role, name in names.items()})
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
            conn.execute(f"DROP OWNED BY {', '.join(names.values())}")
            conn.execute(f"DROP ROLE {', '.join(names.values())}")


def archived(url: str, prefix: str) -> list[tuple[str, str]]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT job_id, status FROM dead_letters WHERE queue = %s ORDER BY job_id", (prefix,)
        ).fetchall()


def test_the_worker_role_runs_no_ddl_and_the_analyst_only_reads(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers, roles: Roles, monkeypatch: pytest.MonkeyPatch
) -> None:
    for job_id in ("d1", "d2"):
        enqueue(r, "fail", {"job_id": job_id}, prefix=prefix)
    as_worker = {"ARCHIVE_URL": roles.worker, "ARCHIVE_MIGRATE": "auto"}  # auto: off, ARCHIVE_URL is set

    refused = workers.start(KINDS, "--burst", **as_worker)
    assert refused.wait(60) == 1
    log = workers.log(refused)
    assert "Traceback" not in log
    assert log.strip().splitlines()[-1] == (
        f"error: table dead_letters not found in schema {roles.worker.rpartition('search_path%3D')[2]} "
        "(the search path's first); create them with `python -m worker migrate` as a role that may run DDL, "
        "then start again"
    )
    told = workers.start(KINDS, "--burst", ARCHIVE_URL=roles.worker, ARCHIVE_MIGRATE="on")
    assert told.wait(60) == 1
    assert "Traceback" not in workers.log(told)
    assert "but the archive's PostgreSQL role may not run DDL (permission denied for schema" in workers.log(told)

    migrated = workers.start(KINDS, "migrate", ARCHIVE_URL=roles.migrator)
    assert migrated.wait(60) == 0, workers.log(migrated)
    workers.burst(KINDS, **as_worker)
    assert archived(roles.analyst, prefix) == [("d1", "dead"), ("d2", "dead")]

    monkeypatch.setenv("ARCHIVE_URL", roles.analyst)
    frame = opslib.archive(prefix=prefix)
    assert sorted(frame["job_id"]) == ["d1", "d2"]
    assert opslib.sql("SELECT count(*) AS n FROM dead_letters", conn=roles.analyst)["n"].tolist() == [2]
    with pytest.raises(opslib.OpslibError, match=r"read-only transaction; opslib\.sql reads only"):
        opslib.sql("DELETE FROM dead_letters", conn=roles.analyst)
    with (
        pytest.raises(opslib.OpslibError, match="permission denied for table dead_letters"),
        opslib.transaction(conn=roles.analyst) as tx,
    ):
        tx.sql("DELETE FROM dead_letters")

    # A replay's record reaches the archive through the worker role (UPDATE).
    dead_ids = [entry_id.decode() for entry_id, _ in r.xrange(keys.dead)]
    opslib.replay(dead_ids[:1], client=r, prefix=prefix)
    workers.burst(KINDS, **as_worker)
    with psycopg.connect(roles.analyst) as conn:
        row = conn.execute("SELECT status FROM dead_letters WHERE dead_id = %s", (dead_ids[0],)).fetchone()
    assert row == ("replayed",)


def test_stagedoor_checks_its_tables_and_only_migrate_creates_them(roles: Roles) -> None:
    with pytest.raises(
        NotMigrated, match=r"^tables organizers, .* not found in schema .*`python -m stagedoor migrate`"
    ):
        check_url(roles.worker)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        migrate_stagedoor(roles.worker)
    migrate_stagedoor(roles.migrator)
    check_url(roles.worker)
    with psycopg.connect(roles.worker) as conn:  # DML, through the default privileges
        conn.execute("INSERT INTO organizers (name) VALUES ('a') RETURNING id").fetchone()
        conn.execute("DELETE FROM organizers")
