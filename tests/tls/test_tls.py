"""The queue over TLS: rediss:// with a CA and a client certificate, PostgreSQL with sslmode=verify-full,
REQUIRE_TLS=on; a wrong CA or host name is one line; a Redis Cluster whose nodes speak TLS."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis

from opslib.connection import describe
from tests.helpers import ROOT
from tests.tls.conftest import Pki, start_tls_redis, stop, tls_client
from worker.embedded.cluster import cluster_port
from worker.errors import SettingsError
from worker.settings import Settings
from worker.store.connection import connect
from worker.store.keys import Keys

KINDS = "tests.queue.kinds_basic"
URLS = ("REDIS_URL", "DATABASE_URL", "ARCHIVE_URL")


def tls_env(pki: Pki, port: int, prefix: str, archive_url: str = "off", host: str = "127.0.0.1") -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in URLS}
    return {
        **base,
        "PYTHONPATH": str(ROOT),
        "WORKER_KINDS": KINDS,
        "QUEUE_PREFIX": prefix,
        "REDIS_URL": f"rediss://{host}:{port}/0",
        "REDIS_CA_FILE": str(pki.ca),
        "REDIS_CERT_FILE": str(pki.client_cert),
        "REDIS_KEY_FILE": str(pki.client_key),
        "ARCHIVE_URL": archive_url,
        "REQUIRE_TLS": "on" if archive_url != "off" else "off",
        "BLOCK_MS": "100",
    }


def run(module: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def one_line_error(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    text = done.stdout + done.stderr
    assert "Traceback" not in text, text
    assert len(done.stderr.strip().splitlines()) <= 1 and len(done.stdout.strip().splitlines()) <= 1, text
    assert any(n in text for n in needles), text


def test_the_core_queue_paths_and_the_archive_over_tls(pki: Pki, tls_redis: int, tls_postgres: str) -> None:
    prefix = f"test:tls:{uuid.uuid4().hex[:8]}:"
    env = tls_env(pki, tls_redis, prefix, archive_url=tls_postgres)
    assert run("worker", "migrate", env=env).returncode == 0
    for kind in ("noop", "flaky_then_ok", "fail_none"):
        done = run("worker", "enqueue", kind, "order_id=4471", env=env)
        assert done.returncode == 0, done.stderr
    burst = run("worker", "--burst", env=env)
    assert burst.returncode == 0, burst.stderr
    with tls_client(pki, tls_redis) as client:
        assert client.scard(f"{prefix}test:done") == 2  # noop, and flaky_then_ok on its third attempt
        attempts = sorted(int(client.get(k)) for k in client.scan_iter(match=f"{prefix}test:attempts:*"))
        assert attempts == [1, 3]  # fail_none once (no retries), flaky_then_ok retried twice
    with psycopg.connect(tls_postgres) as conn:
        rows = conn.execute("SELECT kind, reason FROM dead_letters WHERE queue = %s", [prefix]).fetchall()
    assert [kind for kind, _reason in rows] == ["fail_none"]  # dead-lettered, then archived over TLS

    stats = run("opslib", "stats", env=env)
    assert stats.returncode == 0, stats.stderr
    settings = Settings.from_env(env)
    client = connect(settings)
    try:
        assert describe(client) == f"rediss://127.0.0.1:{tls_redis}/0"  # opslib shows the real scheme
    finally:
        client.close()
    with tls_client(pki, tls_redis) as cleanup:
        for key in cleanup.scan_iter(match=f"{prefix}*"):
            cleanup.delete(key)


def test_a_wrong_ca_or_host_name_is_refused_in_one_line(pki: Pki, tls_redis: int, tls_postgres: str) -> None:
    prefix = "test:tls-refused:"
    wrong_ca = {**tls_env(pki, tls_redis, prefix), "REDIS_CA_FILE": str(pki.other_ca)}
    one_line_error(run("worker", "--burst", env=wrong_ca), "certificate verify failed")
    one_line_error(run("worker", "health", env=wrong_ca), "certificate verify failed")
    one_line_error(run("worker", "enqueue", "noop", env=wrong_ca), "certificate verify failed")
    one_line_error(run("opslib", "stats", env=wrong_ca), "certificate verify failed")
    wrong_name = tls_env(pki, tls_redis, prefix, host="localhost")
    one_line_error(run("worker", "health", env=wrong_name), "match", "mismatch")
    one_line_error(run("opslib", "stats", env=wrong_name), "match", "mismatch")

    other = tls_postgres.replace(f"sslrootcert={pki.ca}", f"sslrootcert={pki.other_ca}")
    one_line_error(run("worker", "migrate", env={**wrong_ca, "ARCHIVE_URL": other}), "certificate verify failed")
    by_name = tls_postgres.replace("@127.0.0.1:", "@localhost:")
    one_line_error(run("worker", "migrate", env={**wrong_ca, "ARCHIVE_URL": by_name}), "does not match host name")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"REDIS_URL": "redis://h:6379/0"}, "REQUIRE_TLS=on but REDIS_URL is redis://...; use rediss://"),
        ({"REDIS_URL": "rediss://h:6380/0?ssl_cert_reqs=none"}, "REQUIRE_TLS=on but REDIS_URL has ssl_cert_reqs=none"),
        ({"DATABASE_URL": "postgresql://u@h/db?sslmode=require"}, "DATABASE_URL has sslmode=require; add ?sslmode"),
        ({"ARCHIVE_URL": "postgresql://u@h/db"}, "ARCHIVE_URL has sslmode=prefer (the default)"),
    ],
)
def test_require_tls_refuses_anything_less_in_one_line(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message.replace("?", r"\?").replace("(", r"\(").replace(")", r"\)")):
        Settings.from_env({"REQUIRE_TLS": "on", **env})
    good = {
        "REQUIRE_TLS": "on",
        "REDIS_URL": "rediss://h:6380/0",
        "DATABASE_URL": "postgresql://u@h/db?sslmode=verify-full&sslrootcert=/ca.crt",
    }
    assert Settings.from_env(good).require_tls


def test_the_worker_exits_2_on_a_url_without_tls_under_require_tls() -> None:
    env = {k: v for k, v in os.environ.items() if k not in URLS}
    env.update({"PYTHONPATH": str(ROOT), "REQUIRE_TLS": "on", "REDIS_URL": "redis://127.0.0.1:6379/0"})
    done = run("worker", "health", env=env)
    assert done.returncode == 2
    assert done.stderr.startswith("error: REQUIRE_TLS=on but REDIS_URL is redis://")
    one_line_error(done, "rediss://")


# ---------------------------------------------------------------------------------- cluster


@pytest.fixture
def tls_cluster(pki: Pki, tls_dir: Path) -> Iterator[int]:
    """Three redis-server primaries speaking TLS to clients and on the cluster bus; the first port."""
    started: list[tuple[int, subprocess.Popen[bytes]]] = []
    taken: set[int] = set()
    try:
        for i in range(3):
            folder = tls_dir / f"cluster-{uuid.uuid4().hex[:6]}-{i}"
            cluster_args = (
                "--cluster-enabled", "yes",
                "--cluster-config-file", str(folder / "nodes.conf"),
                "--cluster-node-timeout", "2000",
                "--tls-cluster", "yes",
            )  # fmt: skip
            # A port below 55535, with its bus port (+10000) free too.
            started.append(start_tls_redis(pki, folder, *cluster_args, port=cluster_port(taken)))
            taken.add(started[-1][0])
        ports = [port for port, _ in started]
        spans = [(0, 5460), (5461, 10922), (10923, 16383)]
        clients = [tls_client(pki, port) for port in ports]
        for epoch, (client, (lo, hi)) in enumerate(zip(clients, spans, strict=True), start=1):
            client.execute_command("CLUSTER", "ADDSLOTSRANGE", lo, hi)
            client.execute_command("CLUSTER", "SET-CONFIG-EPOCH", epoch)
        for port in ports[1:]:
            clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", port)
        deadline = time.monotonic() + 30
        while not all(b"cluster_state:ok" in c.execute_command("CLUSTER", "INFO") for c in clients):
            assert time.monotonic() < deadline, "the TLS cluster did not reach cluster_state:ok in 30 s"
            time.sleep(0.1)
        for c in clients:
            c.close()
        yield ports[0]
    finally:
        for _port, proc in started:
            stop(proc)


def test_a_cluster_smoke_over_tls(pki: Pki, tls_cluster: int) -> None:
    prefix = "{tls}:"
    env = {**tls_env(pki, tls_cluster, prefix), "REDIS_MODE": "cluster"}
    job = run("worker", "enqueue", "noop", env=env)
    assert job.returncode == 0, job.stderr
    burst = run("worker", "--burst", env=env)
    assert burst.returncode == 0, burst.stderr
    settings = Settings.from_env(env)
    client = connect(settings)
    try:
        assert client.scard(f"{prefix}test:done") == 1
        # The one job went through the cluster's one `jobs` stream (the trim chore may since have dropped the
        # acknowledged entry, so the stream's length says nothing).
        assert client.xinfo_stream(Keys(prefix).jobs)["entries-added"] == 1
        client.delete(f"{prefix}test:done", Keys(prefix).jobs)
    finally:
        client.close()


def test_tls_files_need_a_rediss_url() -> None:
    with pytest.raises(SettingsError, match="REDIS_CA_FILE or REDIS_CERT_FILE is set but REDIS_URL is not rediss://"):
        Settings.from_env({"REDIS_URL": "redis://h/0", "REDIS_CA_FILE": __file__})
    assert redis  # the client library under test
