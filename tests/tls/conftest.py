"""TLS servers of the tests' own: a CA made with openssl, Debian's redis-server (TLS built in) and a
private PostgreSQL with ``ssl = on``, on loopback, stopped at the end of the session.

The server certificate names 127.0.0.1 only (no ``localhost``), so connecting by the name
``localhost`` is a wrong host name. Skips, saying why, where openssl, redis-server or Debian's
PostgreSQL binaries (:mod:`tests.helpers_postgres`) are missing (``make test`` on the Debian machine has them all).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
import redis

from tests.helpers_postgres import start_private_postgres
from worker.embedded.servers import free_port

REDIS_SERVER = "/usr/bin/redis-server"


@dataclass(frozen=True)
class Pki:
    """The files of a test CA: the CA, a server pair for 127.0.0.1, a client pair, and another CA."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(folder: Path, name: str) -> None:
    openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-keyout", f"{name}.key", "-out", f"{name}.crt", "-subj", f"/CN={name}",
        cwd=folder,
    )  # fmt: skip


def make_pair(folder: Path, name: str, san: str) -> None:
    """A key and a certificate for ``san`` signed by ``ca``."""
    (folder / f"{name}.ext").write_text(f"subjectAltName={san}\n")
    openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
        "-subj", f"/CN={name}", cwd=folder,
    )  # fmt: skip
    openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "2", "-out", f"{name}.crt", "-extfile", f"{name}.ext",
        cwd=folder,
    )  # fmt: skip


@pytest.fixture(scope="session")
def tls_dir() -> Iterator[Path]:
    if not shutil.which("openssl"):
        pytest.skip("openssl is not installed: the TLS tests make their CA with it")
    path = Path(tempfile.mkdtemp(prefix="stagedoor-tls-"))
    path.chmod(0o755)  # PostgreSQL's user reads the certificates copied from here
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def pki(tls_dir: Path) -> Pki:
    make_ca(tls_dir, "ca")
    make_ca(tls_dir, "other")
    make_pair(tls_dir, "server", "IP:127.0.0.1")
    make_pair(tls_dir, "client", "DNS:stagedoor-worker")
    return Pki(
        tls_dir / "ca.crt",
        tls_dir / "server.crt",
        tls_dir / "server.key",
        tls_dir / "client.crt",
        tls_dir / "client.key",
        tls_dir / "other.crt",
    )


def wait_until(ready: object, proc: subprocess.Popen[bytes], what: str, log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited at start:\n{log.read_text(errors='replace')[-2000:]}")
        if ready():  # type: ignore[operator]
            return
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"{what} did not become ready within 30 s")


def tls_redis_args(pki: Pki, port: int, folder: Path) -> list[str]:
    """redis-server on 127.0.0.1 serving TLS only, asking clients for a certificate of the CA."""
    return [
        REDIS_SERVER,
        "--port", "0",
        "--tls-port", str(port),
        "--bind", "127.0.0.1",
        "--tls-cert-file", str(pki.server_cert),
        "--tls-key-file", str(pki.server_key),
        "--tls-ca-cert-file", str(pki.ca),
        "--tls-auth-clients", "yes",
        "--dir", str(folder),
        "--save", "",
        "--appendonly", "no",
        "--logfile", str(folder / "redis.log"),
    ]  # fmt: skip


def tls_client(pki: Pki, port: int) -> redis.Redis:
    return redis.Redis(
        host="127.0.0.1",
        port=port,
        ssl=True,
        ssl_ca_certs=str(pki.ca),
        ssl_certfile=str(pki.client_cert),
        ssl_keyfile=str(pki.client_key),
        socket_timeout=2,
    )


def start_tls_redis(
    pki: Pki, folder: Path, *extra: str, port: int | None = None
) -> tuple[int, subprocess.Popen[bytes]]:
    folder.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    proc = subprocess.Popen([*tls_redis_args(pki, port, folder), *extra], stdin=subprocess.DEVNULL)

    def ready() -> bool:
        try:
            with tls_client(pki, port) as client:
                return bool(client.ping())
        except (redis.ConnectionError, redis.TimeoutError):
            return False

    wait_until(ready, proc, "redis-server (TLS)", folder / "redis.log")
    return port, proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def tls_redis(pki: Pki, tls_dir: Path) -> Iterator[int]:
    """The port of a redis-server serving TLS only (client certificates required)."""
    if not os.path.exists(REDIS_SERVER):
        pytest.skip(f"{REDIS_SERVER} is not installed (Debian's redis-server has TLS built in)")
    port, proc = start_tls_redis(pki, tls_dir / "redis")
    yield port
    stop(proc)


@pytest.fixture(scope="session")
def tls_postgres(pki: Pki, tls_dir: Path) -> Iterator[str]:
    """A private PostgreSQL with ``ssl = on`` (hostssl only) on 127.0.0.1: its URL, verify-full with the CA."""
    server = start_private_postgres(tls_dir / "pg", cert=pki.server_cert, key=pki.server_key)
    url = f"postgresql://postgres@127.0.0.1:{server.port}/postgres?sslmode=verify-full&sslrootcert={pki.ca}"
    try:
        with psycopg.connect(url, connect_timeout=10) as conn:
            conn.execute("SELECT 1")
        yield url
    finally:
        server.stop()
