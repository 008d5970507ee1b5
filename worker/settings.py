"""Worker settings: one frozen dataclass built from the environment at the edge.

Each setting is declared once, as a field of :class:`Settings` made by
:func:`setting` (environment name, default, parser, help). That one
declaration gives the parsing (:meth:`Settings.from_env`), the table that
``python -m worker --help`` prints (:func:`settings_help`) and the table in
``docs/worker.md`` (:func:`settings_markdown`; a test keeps the two equal).
An application declares its own settings the same way (e.g. ``myapp.settings``).
A bad value raises :class:`SettingsError` naming the setting (the CLI exits 2).
"""

from __future__ import annotations

import dataclasses
import html
import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlparse
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from worker.errors import SettingsError

Parser = Callable[[str, str], Any]

ARCHIVE_OFF = "off"
"""``ARCHIVE_URL=off``: no archive; the dead stream's cap evicts (and counts) as it did before."""
DEAD_HARD_MAXLEN_FACTOR = 10
"""``DEAD_HARD_MAXLEN`` left empty is this many times ``DEAD_MAXLEN``."""


@dataclass(frozen=True)
class Setting:
    """One setting: where it is read from, its default, how it is parsed and what it means."""

    env: str
    default: str
    parse: Parser
    help: str


def setting(env: str, default: str, parse: Parser, help: str) -> Any:
    """A dataclass field read from the environment variable ``env`` (``default`` when unset)."""
    return dataclasses.field(metadata={"setting": Setting(env, default, parse, help)})


def int_at_least(minimum: int) -> Parser:
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


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def positive_float(name: str, raw: str) -> float:
    """Seconds (or another quantity) greater than zero."""
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not a number; give seconds, e.g. 30") from None
    if not value > 0:
        raise SettingsError(f"{name}={raw!r} must be > 0")
    return value


def url(*schemes: str) -> Parser:
    """A parser of URLs with one of ``schemes``; empty stays empty (meaning: the default)."""

    def parse(name: str, raw: str) -> str:
        if not raw:
            return ""
        parsed = urlparse(raw)
        if parsed.scheme not in schemes or not (parsed.netloc or parsed.path or parsed.query):
            raise SettingsError(
                f"{name}={raw!r} is not a URL this worker can use; expected one of "
                + ", ".join(f"{s}://..." for s in schemes)
            )
        return raw

    return parse


def choice(*choices: str, case: Callable[[str], str] = str.lower) -> Parser:
    """A parser of one of ``choices`` (any case), returned in ``case``."""

    def parse(name: str, raw: str) -> str:
        value = raw.strip()
        if value.lower() not in {c.lower() for c in choices}:
            raise SettingsError(f"{name}={raw!r} is not one of: {', '.join(choices)}")
        return case(value)

    return parse


def archive_url(name: str, raw: str) -> str:
    """``off``, empty (the database of DATABASE_URL) or a PostgreSQL URL."""
    if raw.strip().lower() == ARCHIVE_OFF:
        return ARCHIVE_OFF
    try:
        return url("postgresql", "postgres")(name, raw.strip())
    except SettingsError as exc:
        raise SettingsError(f"{exc}, or off (no archive), or empty (the database of DATABASE_URL)") from None


def optional_int_at_least(minimum: int) -> Parser:
    """Like :func:`int_at_least`; empty gives 0 (meaning: the documented default)."""

    def parse(name: str, raw: str) -> int:
        return int_at_least(minimum)(name, raw) if raw.strip() else 0

    return parse


def time_zone(name: str, raw: str) -> str:
    try:
        ZoneInfo(raw)
    except (ZoneInfoNotFoundError, ValueError):
        raise SettingsError(f"{name}={raw!r} is not a known time zone; e.g. UTC or Europe/Prague") from None
    return raw


def metric_name(name: str, raw: str) -> str:
    """A Prometheus metric name's first word: a letter or ``_``, then letters, digits or ``_``."""
    value = raw.strip()
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise SettingsError(f"{name}={raw!r} is not a metric name; use letters, digits and _, e.g. myapp")
    return value


def as_is(_name: str, raw: str) -> str:
    return raw


def module_list(_name: str, raw: str) -> tuple[str, ...]:
    return tuple(m.strip() for m in raw.split(",") if m.strip())


def default_worker_name() -> str:
    """This process's consumer name when ``WORKER_NAME`` is empty: ``<host>-<pid>``."""
    return f"{socket.gethostname()}-{os.getpid()}"


def worker_name(_name: str, raw: str) -> str:
    return raw.strip() or default_worker_name()


S = TypeVar("S")


def from_env(cls: type[S], env: Mapping[str, str] | None = None, overrides: Mapping[str, str] | None = None) -> S:
    """Build the settings dataclass ``cls`` from ``env`` (default ``os.environ``); ``overrides`` win."""
    env = os.environ if env is None else env
    overrides = overrides or {}
    values: dict[str, Any] = {}
    for name, spec in declared(cls).items():
        raw = overrides.get(name)
        if raw is None:
            raw = env.get(spec.env, spec.default)
        values[name] = spec.parse(spec.env, raw)
    return cls(**values)


def declared(cls: type) -> dict[str, Setting]:
    """Field name -> :class:`Setting`, in declaration order."""
    return {f.name: f.metadata["setting"] for f in dataclasses.fields(cls)}


def settings_help(cls: type, title: str = "settings (environment variables):") -> str:
    """The plain-text settings table (``--help``)."""
    specs = declared(cls).values()
    width = max(len(s.env) for s in specs)
    lines = [title]
    for s in specs:
        lines.append(f"  {s.env:<{width}}  default {s.default or '(empty)'}: {s.help}")
    return "\n".join(lines)


def settings_markdown(cls: type) -> str:
    """The settings table in Markdown, as the docs carry it (``<host>`` escaped, so that it shows)."""
    rows = ["| setting | default | meaning |", "| --- | --- | --- |"]
    for s in declared(cls).values():
        default = f"`{s.default}`" if s.default else "(empty)"
        rows.append(f"| `{s.env}` | {default} | {html.escape(s.help, quote=False).replace('|', '/')} |")
    return "\n".join(rows)


@dataclass(frozen=True)
class Settings:
    """The worker's configuration; build it with :meth:`from_env`."""

    redis_url: str = setting(
        "REDIS_URL",
        "",
        url("redis", "rediss", "unix"),
        "Redis/Valkey URL (redis://, rediss://, unix://); empty: start the embedded server",
    )
    redis_mode: str = setting(
        "REDIS_MODE",
        "auto",
        choice("auto", "single", "cluster"),
        "auto: ask the server whether it runs a Redis Cluster; single or cluster: insist, refusing the other",
    )
    database_url: str = setting(
        "DATABASE_URL",
        "",
        url("postgresql", "postgres"),
        "PostgreSQL URL; empty: start the embedded PostgreSQL (when a kind's lifespan needs one)",
    )
    worker_name: str = setting("WORKER_NAME", "", worker_name, "consumer name in the group; empty: <host>-<pid>")
    concurrency: int = setting(
        "WORKER_CONCURRENCY", "8", positive_int, "job slots; the loop never reads more entries than free slots"
    )
    processes: int = setting(
        "WORKER_PROCESSES",
        "1",
        positive_int,
        "worker processes (one consumer and one core each) under one supervisor; 1: no supervisor",
    )
    kinds: tuple[str, ...] = setting(
        "WORKER_KINDS",
        "",
        module_list,
        "comma-separated modules that declare the job kinds, e.g. myapp.kinds (required to run)",
    )
    prefix: str = setting("QUEUE_PREFIX", "", as_is, "put in front of every key, e.g. {jobs}:")
    partitions: int = setting(
        "QUEUE_PARTITIONS",
        "1",
        positive_int,
        "partitions of the queue, each with its own jobs, delayed and jobs:dead under a hash tag of its own "
        "(spread over a cluster's primaries); every worker of a queue must use the same count",
    )
    wait_replicas: int = setting(
        "WAIT_REPLICAS",
        "0",
        non_negative_int,
        "replicas that must acknowledge an enqueue and each retry or dead-letter move (WAIT) before it counts "
        "as done; 0: do not wait (asynchronous replication: a failover can lose the last writes)",
    )
    max_deliveries: int = setting(
        "MAX_DELIVERIES", "3", positive_int, "deliveries after which a pending entry is dead-lettered as poison"
    )
    dead_maxlen: int = setting(
        "DEAD_MAXLEN",
        "10000",
        positive_int,
        "jobs:dead keeps about this many recent entries; with the archive on, only archived ones are trimmed "
        "(with it off, the cap evicts and counts)",
    )
    dead_hard_maxlen: int = setting(
        "DEAD_HARD_MAXLEN",
        "",
        optional_int_at_least(1),
        "with the archive on, the ceiling past which jobs:dead evicts unarchived entries (counted in "
        "jobs:dead:evicted) to protect Redis's memory; empty: 10 x DEAD_MAXLEN",
    )
    archive_url: str = setting(
        "ARCHIVE_URL",
        "",
        archive_url,
        "PostgreSQL URL of the dead-letter archive (table dead_letters); empty: the database of DATABASE_URL "
        "(the embedded PostgreSQL when that is unset); off: no archive",
    )
    reclaim_idle_ms: int = setting(
        "RECLAIM_IDLE_MS", "60000", positive_int, "idle time after which a pending entry is reclaimed"
    )
    reclaim_interval_s: float = setting(
        "RECLAIM_INTERVAL_S", "5", positive_float, "how often each worker looks for idle pending entries"
    )
    block_ms: int = setting("BLOCK_MS", "1000", positive_int, "XREADGROUP block timeout")
    shutdown_grace_s: float = setting(
        "SHUTDOWN_GRACE_S", "30", positive_float, "on SIGTERM, how long running jobs may take to finish"
    )
    max_field_bytes: int = setting(
        "MAX_FIELD_BYTES", "65536", positive_int, "a job field larger than this is dead-lettered as malformed"
    )
    traceback_bytes: int = setting(
        "TRACEBACK_BYTES", "8192", positive_int, "tracebacks stored on dead entries are cut to this size"
    )
    schedule_tz: str = setting("SCHEDULE_TZ", "UTC", time_zone, "time zone of cron schedules that name none")
    scheduler: bool = setting(
        "SCHEDULER",
        "on",
        lambda n, r: choice("on", "off")(n, r) == "on",
        "on/off: run the scheduler chore in this worker",
    )
    metrics_port: int = setting(
        "METRICS_PORT", "0", non_negative_int, "Prometheus endpoint port on 127.0.0.1/0.0.0.0; 0: off"
    )
    metrics_host: str = setting("METRICS_HOST", "0.0.0.0", as_is, "address the metrics endpoint binds")
    metrics_namespace: str = setting(
        "METRICS_NAMESPACE",
        "worker",
        metric_name,
        "first word of every metric name (<namespace>_jobs_succeeded_total, ...), e.g. myapp",
    )
    metrics_interval_s: float = setting(
        "METRICS_INTERVAL_S",
        "5",
        positive_float,
        "how often the queue-wide gauges are read (by one worker, under a lock)",
    )
    log_format: str = setting("LOG_FORMAT", "text", choice("text", "json"), "text or json (one JSON object per line)")
    log_level: str = setting(
        "LOG_LEVEL",
        "INFO",
        choice("DEBUG", "INFO", "WARNING", "ERROR", case=str.upper),
        "DEBUG, INFO, WARNING or ERROR",
    )
    data_dir: str = setting("WORKER_DATA_DIR", ".data", as_is, "where the embedded servers keep their files")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: str) -> Settings:
        """Read every setting from ``env`` (default ``os.environ``); ``overrides`` (by field name) win."""
        return from_env(cls, env, overrides)

    @classmethod
    def one(cls, field: str, env: Mapping[str, str] | None = None) -> Any:
        """One setting (by field name) read from ``env`` (default ``os.environ``) and checked, the others
        left unread: for a caller such as ``enqueue`` that needs a single value and must not fail on another."""
        spec = declared(cls)[field]
        return spec.parse(spec.env, (os.environ if env is None else env).get(spec.env, spec.default))

    def __post_init__(self) -> None:
        if self.dead_hard_maxlen and self.dead_hard_maxlen < self.dead_maxlen:
            raise SettingsError(
                f"DEAD_HARD_MAXLEN={self.dead_hard_maxlen} is below DEAD_MAXLEN={self.dead_maxlen}; "
                "the hard ceiling must be at least the cap (leave it empty for 10 x DEAD_MAXLEN)"
            )

    @property
    def worker_name_set(self) -> bool:
        """True when ``WORKER_NAME`` named this worker (not the ``<host>-<pid>`` default)."""
        return self.worker_name != default_worker_name()

    @property
    def archive_on(self) -> bool:
        """True unless ``ARCHIVE_URL=off``."""
        return self.archive_url != ARCHIVE_OFF

    @property
    def dead_ceiling(self) -> int:
        """The length past which burying evicts from ``jobs:dead``: the hard ceiling with the archive on,
        ``DEAD_MAXLEN`` with it off."""
        if not self.archive_on:
            return self.dead_maxlen
        return self.dead_hard_maxlen or DEAD_HARD_MAXLEN_FACTOR * self.dead_maxlen


#: Field name -> declaration, for tests and tools that list the settings.
SETTINGS: dict[str, Setting] = declared(Settings)
