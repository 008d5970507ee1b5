"""Fixtures: real servers, one key prefix and one schema per test, real worker processes.

With ``REDIS_URL`` / ``DATABASE_URL`` set (``.ci/run`` sets them to this
machine's Redis 7 and PostgreSQL 15) the tests use those servers with a unique
key prefix and schema and never flush anything. Unset, a session-wide embedded
Valkey (and, for tests that ask, an embedded PostgreSQL) is started in a temp
folder and stopped at the end.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlparse

import psycopg
import pytest
import redis

from tests.faults.helpers_proxy import Proxy
from tests.helpers import Workers, with_schema
from worker.embedded.servers import EmbeddedServer, start_postgres, start_redis
from worker.store.keys import Keys
from worker.store.queues import DECLARED_QUEUES


@pytest.fixture(scope="session")
def tmp_servers_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="stagedoor-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _server_url(env_name: str, start: Callable[[], EmbeddedServer]) -> Iterator[str]:
    """The URL in ``env_name`` when set; else a server started here and stopped after the session."""
    url = os.environ.get(env_name, "")
    if url:
        yield url
        return
    server = start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_url(tmp_servers_dir: Path) -> Iterator[str]:
    """The Redis-compatible server of this run: REDIS_URL, or an embedded Valkey."""
    yield from _server_url("REDIS_URL", lambda: start_redis(tmp_servers_dir / "valkey"))


@pytest.fixture(scope="session")
def database_url(tmp_servers_dir: Path) -> Iterator[str]:
    """The PostgreSQL of this run: DATABASE_URL, or an embedded PostgreSQL."""
    yield from _server_url("DATABASE_URL", lambda: start_postgres(tmp_servers_dir / "postgres"))


@pytest.fixture(scope="session")
def archive_url(database_url: str) -> Iterator[str]:
    """The dead-letter archive of this run: a schema of its own in the run's PostgreSQL (rows are
    kept apart by queue, i.e. by each test's prefix), dropped at the end."""
    schema = f"archive_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    yield with_schema(database_url, schema)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(scope="session", autouse=True)
def archive_on(archive_url: str) -> Iterator[None]:
    """The archive is on in every test, as it is by default: ``ARCHIVE_URL`` points at the run's
    archive for the workers the tests start and for opslib. A test that wants the old
    behaviour (the cap evicts) sets ``ARCHIVE_URL=off``. The tests' schemas are throwaway, like the
    embedded stack's, so workers create their tables at start (``ARCHIVE_MIGRATE``,
    ``STAGEDOOR_MIGRATE``); the tests of the roles (tests/queue/test_pg_roles.py) set them off."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ARCHIVE_URL", archive_url)
        patch.setenv("ARCHIVE_MIGRATE", "on")
        patch.setenv("STAGEDOOR_MIGRATE", "on")
        yield


@pytest.fixture(autouse=True)
def stagedoors_queues_for_its_own_tests(request: pytest.FixtureRequest) -> Iterator[None]:
    """Outside tests/stagedoor, ``enqueue`` here does not send Stagedoor's kinds to their declared queues.

    A kind's declared queue applies where the calling process registers the kind
    (:data:`worker.store.queues.DECLARED_QUEUES`); the suite imports ``stagedoor.kinds`` at collection, so
    without this a test of the core enqueueing ``send_email`` for a worker of its own kinds would send it
    to ``critical``, which that worker does not serve, or not, by the order of collection.
    """
    if "stagedoor" in request.node.path.parts:
        yield
        return
    from worker.kinds import REGISTRY

    saved = dict(DECLARED_QUEUES)
    for name, spec in REGISTRY.kinds.items():
        if getattr(spec.handler, "__module__", "").startswith("stagedoor."):
            DECLARED_QUEUES.pop(name, None)
    try:
        yield
    finally:
        DECLARED_QUEUES.clear()
        DECLARED_QUEUES.update(saved)


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of this test's own; its keys are deleted afterwards (never a flush)."""
    value = f"test:{uuid.uuid4().hex[:10]}:"
    yield value
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(match=f"{value}*", count=1000):
        client.delete(key)
    client.close()


@pytest.fixture
def keys(prefix: str) -> Keys:
    return Keys(prefix)


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    """A plain client (bytes in, bytes out) on the test's server."""
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def pg_url(database_url: str) -> Iterator[str]:
    """A connection URL whose search_path is a fresh schema of this test's own."""
    schema = f"t_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    yield with_schema(database_url, schema)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def workers(redis_url: str, prefix: str, tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(redis_url, prefix, tmp_path)
    yield pool
    pool.stop_all()


@pytest.fixture
def redis_proxy(redis_url: str) -> Iterator[Proxy]:
    """A TCP proxy in front of the run's Redis (:class:`tests.faults.helpers_proxy.Proxy`): a test holds,
    drops or resets what passes through it (replies lost, connections cut)."""
    port = urlparse(redis_url).port
    assert port is not None
    started = Proxy(port)
    yield started
    started.stop()
