"""The core queue tests on a server that disables commands as managed services do.

ElastiCache renames away CONFIG, DEBUG, SAVE, BGSAVE, BGREWRITEAOF, MIGRATE,
REPLICAOF, SYNC and SHUTDOWN; Memorystore (a single server) also ACL, CLIENT,
CLUSTER, COMMAND, MONITOR and OBJECT. A private valkey-server is started with
those commands renamed to "" (unknown), and the core queue test files run
against it in a child pytest: moves, enqueue, the archive hand-off, the queue
state (metrics, ``queue_stats``), scheduler ticks. The server is stopped by its
pid (SHUTDOWN is gone).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from tests.helpers import ROOT
from worker.embedded.servers import start_redis

ELASTICACHE = ("CONFIG", "DEBUG", "SAVE", "BGSAVE", "BGREWRITEAOF", "MIGRATE", "REPLICAOF", "SYNC", "SHUTDOWN")
PROFILES = {
    "elasticache": ELASTICACHE,
    "memorystore": (*ELASTICACHE, "ACL", "CLIENT", "CLUSTER", "COMMAND", "MONITOR", "OBJECT"),
}
CORE = (
    "tests/queue/test_moves.py",
    "tests/queue/test_enqueue.py",
    "tests/queue/test_archive.py",
    "tests/queue/test_queue_state.py",
    "tests/scheduler/test_ticks.py",
)


def renamed_away(commands: tuple[str, ...]) -> tuple[str, ...]:
    """valkey-server arguments that make each of ``commands`` unknown."""
    return tuple(arg for command in commands for arg in ("--rename-command", command, ""))


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_the_core_queue_tests_pass_on_a_managed_profile(profile: str, tmp_path: Path, database_url: str) -> None:
    server = start_redis(tmp_path / "valkey", extra_args=renamed_away(PROFILES[profile]))
    try:
        with redis.Redis.from_url(server.url) as client:
            for command in PROFILES[profile]:
                with pytest.raises(redis.ResponseError, match="unknown command"):
                    client.execute_command(command, "HELP")
        env = {**os.environ, "REDIS_URL": server.url, "DATABASE_URL": database_url, "PYTHONPATH": str(ROOT)}
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *CORE],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
        print(f"{profile}: {result.stdout.strip().splitlines()[-1]}")
    finally:
        server.stop()
