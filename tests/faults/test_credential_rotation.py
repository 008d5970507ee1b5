"""Passwords rotated while workers run: 0 jobs lost, 0 restarts.

Two workers read ``REDIS_URL_FILE`` and ``ARCHIVE_URL_FILE``, logging in as a
Redis ACL user and a PostgreSQL role of the test's own (a private PostgreSQL
that asks for passwords: the shared one trusts 127.0.0.1). Mid-run:

- Redis: the user gets the new password beside the old one, the file is
  rewritten, the old password is removed, and every connection of the user is
  killed (``CLIENT KILL USER``), so each worker must log in again, with what
  the file holds now;
- PostgreSQL: ``ALTER ROLE ... PASSWORD``, the file rewritten, the role's
  backends terminated, so the archive must log in again.

Every job enqueued before and after completes or is archived (a noop cut
mid-run by the killed connection is dead-lettered and archived: noop has no
retries), and both
worker processes are the ones started (no restart), their logs naming no
password.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis

from tests.helpers import Workers, wait_for
from tests.helpers_postgres import PrivatePostgres, start_private_postgres
from worker.store.enqueue import enqueue

KINDS = "tests.queue.kinds_basic"
BATCH_OK, BATCH_DEAD = 60, 5


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    # Not under tmp_path: pytest keeps it private (0700) from the user PostgreSQL runs as.
    folder = Path(tempfile.mkdtemp(prefix="stagedoor-rotation-"))
    folder.chmod(0o755)
    server = start_private_postgres(folder / "pg", tcp_auth="scram-sha-256")
    yield server
    server.stop()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def redis_user(r: redis.Redis) -> Iterator[str]:
    name = f"test-rotation-{uuid.uuid4().hex[:8]}"
    yield name
    r.acl_deluser(name)


def redis_url_for(redis_url: str, user: str, password: str) -> str:
    scheme, _, rest = redis_url.partition("://")
    return f"{scheme}://{user}:{password}@{rest.rpartition('@')[2]}"


def archived(pg: PrivatePostgres, prefix: str, kind: str) -> int:
    with psycopg.connect(pg.admin_url, dbname="rotation") as conn:
        query = "SELECT count(*) FROM dead_letters WHERE queue = %s AND kind = %s"
        return int(conn.execute(query, [prefix, kind]).fetchone()[0])  # type: ignore[index]


@pytest.mark.timeout(240)
def test_redis_and_postgres_passwords_rotate_under_running_workers(
    r: redis.Redis, redis_url: str, prefix: str, workers: Workers, private_pg: PrivatePostgres, redis_user: str
) -> None:
    old_redis, new_redis = secrets.token_hex(12), secrets.token_hex(12)
    old_pg, new_pg = secrets.token_hex(12), secrets.token_hex(12)
    r.acl_setuser(redis_user, enabled=True, passwords=[f"+{old_redis}"], keys=["*"], channels=["*"], commands=["+@all"])
    role = f"rotation_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(private_pg.admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{old_pg}'")
        admin.execute(f"CREATE DATABASE rotation OWNER {role}")
    secrets_dir = workers.tmp / "secrets"
    secrets_dir.mkdir()
    redis_file, archive_file = secrets_dir / "redis_url", secrets_dir / "archive_url"
    redis_file.write_text(redis_url_for(redis_url, redis_user, old_redis))
    archive_file.write_text(f"postgresql://{role}:{old_pg}@127.0.0.1:{private_pg.port}/rotation")
    env = {
        "REDIS_URL": "",
        "ARCHIVE_URL": "",
        "REDIS_URL_FILE": str(redis_file),
        "ARCHIVE_URL_FILE": str(archive_file),
        "BLOCK_MS": "200",
    }
    migrated = workers.start(KINDS, "migrate", log_name="migrate.log", **env)
    assert migrated.wait(60) == 0, workers.log(migrated)
    procs = [workers.start(KINDS, log_name=f"worker-{i}.log", **env) for i in range(2)]
    pids = [p.pid for p in procs]
    done_key = f"{prefix}test:done"

    def batch() -> None:
        for i in range(BATCH_OK):
            enqueue(r, "noop", {"n": str(i)}, prefix=prefix)
        for i in range(BATCH_DEAD):
            enqueue(r, "fail_none", {"order_id": str(i)}, prefix=prefix)

    def settled(rounds: int) -> bool:
        """Nothing lost: every noop done, or (cut by CLIENT KILL mid-job: noop has no retries) dead-lettered
        and archived; every fail_none archived."""
        noops = r.scard(done_key) + archived(private_pg, prefix, "noop")
        return noops == rounds * BATCH_OK and archived(private_pg, prefix, "fail_none") == rounds * BATCH_DEAD

    batch()
    wait_for(lambda: settled(1), timeout_s=60, what="the first batch done and its dead letters archived")
    assert r.scard(done_key) == BATCH_OK

    # Redis: old and new side by side, the file rewritten, the old one removed, every connection cut.
    r.acl_setuser(redis_user, enabled=True, passwords=[f"+{new_redis}"])
    redis_file.write_text(redis_url_for(redis_url, redis_user, new_redis))
    r.acl_setuser(redis_user, enabled=True, passwords=[f"-{old_redis}"])
    # PostgreSQL: the new password, the file rewritten, the role's sessions ended.
    with psycopg.connect(private_pg.admin_url, autocommit=True) as admin:
        admin.execute(f"ALTER ROLE {role} PASSWORD '{new_pg}'")
        archive_file.write_text(f"postgresql://{role}:{new_pg}@127.0.0.1:{private_pg.port}/rotation")
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", [role])
    killed = r.execute_command("CLIENT", "KILL", "USER", redis_user)
    assert killed >= 2, "each worker held connections as the rotated user"

    batch()
    wait_for(lambda: settled(2), timeout_s=90, what="the batch after the rotation done or archived")
    assert r.scard(done_key) > BATCH_OK  # the workers logged in again with the new Redis password

    assert [p.pid for p in procs] == pids
    assert all(p.poll() is None for p in procs), "a worker exited"
    for proc in procs:
        log = workers.log(proc)
        assert "Traceback" not in log, log
        for password in (old_redis, new_redis, old_pg, new_pg):
            assert password not in log
    with psycopg.connect(private_pg.admin_url, autocommit=True) as admin:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)
        admin.execute("DROP DATABASE rotation")
        admin.execute(f"DROP ROLE {role}")
