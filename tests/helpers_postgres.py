"""A private PostgreSQL of a test's own from Debian's server binaries (``pg_config --bindir``), on
127.0.0.1 with the authentication and TLS the test asks for: what the embedded one (trust, socket
only) cannot give. As root it runs as the ``postgres`` user (``runuser``), as PLATFORM's recipe says.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from worker.embedded.servers import free_port


@dataclass
class PrivatePostgres:
    """A running server: its port, the folder that holds its data and socket, how to stop it."""

    folder: Path
    port: int
    as_user: list[str]
    bindir: Path

    @property
    def admin_url(self) -> str:
        """The superuser over the unix socket (trusted), for the test's own set-up."""
        return f"postgresql://postgres@/postgres?host={self.folder}&port={self.port}"

    def stop(self) -> None:
        subprocess.run(
            [*self.as_user, str(self.bindir / "pg_ctl"), "-D", str(self.folder / "data"), "-m", "fast", "-w", "stop"],
            capture_output=True,
            timeout=120,
        )


def pg_bindir() -> Path | None:
    try:
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    path = Path(out.strip())
    return path if (path / "initdb").exists() else None


def start_private_postgres(
    folder: Path, *, tcp_auth: str = "trust", cert: Path | None = None, key: Path | None = None
) -> PrivatePostgres:
    """initdb into ``folder``/data and start on a free port. TCP on 127.0.0.1 with ``tcp_auth``
    (``trust``, ``scram-sha-256``), ``hostssl`` only when ``cert`` and ``key`` are given; the unix
    socket (in ``folder``) is trusted. Skips, saying why, without Debian's server binaries."""
    bindir = pg_bindir()
    if bindir is None:
        pytest.skip("Debian's PostgreSQL server binaries are not installed (pg_config --bindir)")
    folder.mkdir(parents=True, exist_ok=True)
    as_user: list[str] = []
    owner = None
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", "postgres", "--"]
        owner = pwd.getpwnam("postgres")
        os.chown(folder, owner.pw_uid, owner.pw_gid)
    data = folder / "data"
    port = free_port()
    subprocess.run(
        [*as_user, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    settings = f"port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{folder}'\n"
    host = "host"
    if cert is not None and key is not None:
        for source, name in ((cert, "server.crt"), (key, "server.key")):
            shutil.copy(source, data / name)
            (data / name).chmod(0o600)
            if owner is not None:
                os.chown(data / name, owner.pw_uid, owner.pw_gid)
        settings += "ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n"
        host = "hostssl"
    with open(data / "postgresql.conf", "a") as conf:
        conf.write(settings)
    (data / "pg_hba.conf").write_text(f"local all all trust\n{host} all all 127.0.0.1/32 {tcp_auth}\n")
    subprocess.run(
        [*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-w", "-l", str(folder / "log"), "start"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return PrivatePostgres(folder, port, as_user, bindir)
