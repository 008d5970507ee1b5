"""``python -m stagedoor migrate``: apply Stagedoor's PostgreSQL schema (idempotent).

The worker runs Stagedoor's jobs with ``WORKER_KINDS=stagedoor.kinds``; this
command is for a deploy step that migrates before any worker starts. Exit
codes as the worker's: 0 done, 1 a failure at run time, 2 a bad setting.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import psycopg

from stagedoor.schema import migrate_url
from stagedoor.settings import StagedoorSettings
from worker.embedded.servers import EmbeddedServerError, embedded_stack
from worker.errors import SettingsError
from worker.redact import one_line, redact
from worker.settings import Settings, settings_help


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m stagedoor",
        description="Stagedoor, the application whose jobs the worker runs (WORKER_KINDS=stagedoor.kinds).",
        epilog=settings_help(StagedoorSettings, "Stagedoor's settings (environment variables):"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    sub.add_parser(
        "migrate",
        help="apply Stagedoor's schema to DATABASE_URL (empty: the embedded PostgreSQL, when no server URL is set)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    build_parser().parse_args(argv)
    try:
        settings = Settings.from_env()
        StagedoorSettings.from_env()
        if not settings.database_url and settings.servers_configured:
            # Fail closed, as the worker does: a configured server rules the embedded PostgreSQL out.
            raise SettingsError("set DATABASE_URL (or DATABASE_URL_FILE): another server URL is set")
        data_dir = Path(settings.data_dir)
        url = settings.current("database_url")
        with embedded_stack("", url, data_dir=data_dir, need_postgres=not url, need_redis=False) as urls:
            migrate_url(urls[1])
    except SettingsError as exc:
        print(redact(f"error: {exc}"), file=sys.stderr)
        return 2
    except (EmbeddedServerError, psycopg.OperationalError) as exc:
        print(redact(f"error: {one_line(exc)}"), file=sys.stderr)
        return 1
    print("migrated")
    return 0
