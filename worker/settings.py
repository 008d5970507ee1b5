"""Worker settings: one frozen dataclass built from the environment at the edge.

Every setting is listed in :data:`SETTINGS` with its environment name, default
and meaning; ``python -m worker --help`` prints that table, and a bad value
raises :class:`SettingsError` naming the setting (the CLI exits 2).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlparse
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from worker.errors import SettingsError

DEFAULT_KINDS = "worker.stagedoor.kinds"


@dataclass(frozen=True)
class Setting:
    env: str
    default: str
    help: str


SETTINGS: dict[str, Setting] = {
    "redis_url": Setting(
        "REDIS_URL",
        "",
        "Redis/Valkey URL (redis://, rediss://, unix://); empty: start the embedded server",
    ),
    "database_url": Setting(
        "DATABASE_URL",
        "",
        "PostgreSQL URL; empty: start the embedded PostgreSQL (when a kind needs it)",
    ),
    "worker_name": Setting("WORKER_NAME", "", "consumer name in the group; empty: <host>-<pid>"),
    "concurrency": Setting("WORKER_CONCURRENCY", "8", "job slots; the loop never reads more entries than free slots"),
    "kinds": Setting("WORKER_KINDS", DEFAULT_KINDS, "comma-separated modules to import for kinds and schedules"),
    "prefix": Setting("QUEUE_PREFIX", "", "put in front of every key, e.g. {stagedoor}:"),
    "max_deliveries": Setting(
        "MAX_DELIVERIES", "3", "deliveries after which a pending entry is dead-lettered as poison"
    ),
    "dead_maxlen": Setting("DEAD_MAXLEN", "10000", "approximate cap of jobs:dead (evictions are counted)"),
    "reclaim_idle_ms": Setting("RECLAIM_IDLE_MS", "60000", "idle time after which a pending entry is reclaimed"),
    "reclaim_interval_s": Setting("RECLAIM_INTERVAL_S", "5", "how often each worker looks for idle pending entries"),
    "block_ms": Setting("BLOCK_MS", "1000", "XREADGROUP block timeout"),
    "shutdown_grace_s": Setting("SHUTDOWN_GRACE_S", "30", "on SIGTERM, how long running jobs may take to finish"),
    "max_field_bytes": Setting(
        "MAX_FIELD_BYTES", "65536", "a job field larger than this is dead-lettered as malformed"
    ),
    "traceback_bytes": Setting("TRACEBACK_BYTES", "8192", "tracebacks stored on dead entries are cut to this size"),
    "schedule_tz": Setting("SCHEDULE_TZ", "UTC", "time zone of cron schedules that name none"),
    "scheduler": Setting("SCHEDULER", "on", "on/off: run the scheduler chore in this worker"),
    "metrics_port": Setting("METRICS_PORT", "0", "Prometheus endpoint port on 127.0.0.1/0.0.0.0; 0: off"),
    "metrics_host": Setting("METRICS_HOST", "0.0.0.0", "address the metrics endpoint binds"),
    "metrics_interval_s": Setting(
        "METRICS_INTERVAL_S", "5", "how often the queue-wide gauges are read (by one worker, under a lock)"
    ),
    "mail_api_url": Setting(
        "MAIL_API_URL", "", "the mail provider's API (send_email, send_reminder); make run: a stand-in"
    ),
    "payrail_url": Setting("PAYRAIL_URL", "", "Payrail's API (reconcile_payments); make run: a stand-in"),
    "db_pool_timeout_s": Setting(
        "DB_POOL_TIMEOUT_S", "30", "how long a job waits for a PostgreSQL connection before its attempt fails"
    ),
    "log_format": Setting("LOG_FORMAT", "text", "text or json (one JSON object per line)"),
    "log_level": Setting("LOG_LEVEL", "INFO", "DEBUG, INFO, WARNING or ERROR"),
    "data_dir": Setting("STAGEDOOR_DATA_DIR", ".data", "where the embedded servers keep their files"),
}


def _int_at_least(minimum: int) -> Callable[[str, str], int]:
    """A parser of whole numbers >= ``minimum`` that names the setting when it refuses."""

    def parse(name: str, raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise SettingsError(f"{name}={raw!r} is not an integer; give a whole number >= {minimum}") from None
        if value < minimum:
            raise SettingsError(f"{name}={raw!r} must be >= {minimum}")
        return value

    return parse


_positive_int = _int_at_least(1)
_non_negative_int = _int_at_least(0)


def _positive_float(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not a number; give seconds, e.g. 30") from None
    if not value > 0:
        raise SettingsError(f"{name}={raw!r} must be > 0")
    return value


def _url(name: str, raw: str, schemes: tuple[str, ...]) -> str:
    if not raw:
        return ""
    parsed = urlparse(raw)
    if parsed.scheme not in schemes or not (parsed.netloc or parsed.path or parsed.query):
        raise SettingsError(
            f"{name}={raw!r} is not a URL this worker can use; expected one of "
            + ", ".join(f"{s}://..." for s in schemes)
        )
    return raw


def _choice(name: str, raw: str, choices: tuple[str, ...]) -> str:
    value = raw.strip()
    if value.lower() not in {c.lower() for c in choices}:
        raise SettingsError(f"{name}={raw!r} is not one of: {', '.join(choices)}")
    return value


def _tz(name: str, raw: str) -> str:
    try:
        ZoneInfo(raw)
    except (ZoneInfoNotFoundError, ValueError):
        raise SettingsError(f"{name}={raw!r} is not a known time zone; e.g. UTC or Europe/Prague") from None
    return raw


_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "redis_url": lambda n, r: _url(n, r, ("redis", "rediss", "unix")),
    "database_url": lambda n, r: _url(n, r, ("postgresql", "postgres")),
    "worker_name": lambda n, r: r.strip() or f"{socket.gethostname()}-{os.getpid()}",
    "concurrency": _positive_int,
    "kinds": lambda n, r: tuple(m.strip() for m in r.split(",") if m.strip()),
    "prefix": lambda n, r: r,
    "max_deliveries": _positive_int,
    "dead_maxlen": _positive_int,
    "reclaim_idle_ms": _positive_int,
    "reclaim_interval_s": _positive_float,
    "block_ms": _positive_int,
    "shutdown_grace_s": _positive_float,
    "max_field_bytes": _positive_int,
    "traceback_bytes": _positive_int,
    "schedule_tz": _tz,
    "scheduler": lambda n, r: _choice(n, r, ("on", "off")).lower() == "on",
    "metrics_port": _non_negative_int,
    "metrics_host": lambda n, r: r,
    "metrics_interval_s": _positive_float,
    "mail_api_url": lambda n, r: _url(n, r, ("http", "https")),
    "payrail_url": lambda n, r: _url(n, r, ("http", "https")),
    "db_pool_timeout_s": _positive_float,
    "log_format": lambda n, r: _choice(n, r, ("text", "json")).lower(),
    "log_level": lambda n, r: _choice(n, r, ("DEBUG", "INFO", "WARNING", "ERROR")).upper(),
    "data_dir": lambda n, r: r,
}


@dataclass(frozen=True)
class Settings:
    """The worker's configuration; build it with :meth:`from_env`."""

    redis_url: str
    database_url: str
    worker_name: str
    concurrency: int
    kinds: tuple[str, ...]
    prefix: str
    max_deliveries: int
    dead_maxlen: int
    reclaim_idle_ms: int
    reclaim_interval_s: float
    block_ms: int
    shutdown_grace_s: float
    max_field_bytes: int
    traceback_bytes: int
    schedule_tz: str
    scheduler: bool
    metrics_port: int
    metrics_host: str
    metrics_interval_s: float
    mail_api_url: str
    payrail_url: str
    db_pool_timeout_s: float
    log_format: str
    log_level: str
    data_dir: str

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: str) -> Settings:
        """Read every setting from ``env`` (default ``os.environ``); ``overrides`` win."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            spec = SETTINGS[f.name]
            raw = overrides.get(f.name)
            if raw is None:
                raw = env.get(spec.env, spec.default)
            values[f.name] = _PARSERS[f.name](spec.env, raw)
        return cls(**values)


def settings_help() -> str:
    """The settings table printed by ``python -m worker --help``."""
    width = max(len(s.env) for s in SETTINGS.values())
    lines = ["settings (environment variables):"]
    for s in SETTINGS.values():
        default = s.default if s.default else "(empty)"
        lines.append(f"  {s.env:<{width}}  default {default}: {s.help}")
    return "\n".join(lines)
