"""Worker settings: one frozen dataclass built from the environment at the edge, its ~40 declarations.

Each setting is declared once, as a field of :class:`Settings` made by
:func:`setting` (environment name, default, parser, help). That one
declaration gives the parsing (:meth:`Settings.from_env`), the table that
``python -m worker --help`` prints (:func:`settings_help`) and the table in
``docs/worker.md`` (:func:`settings_markdown`; a test keeps the two equal).
An application declares its own settings the same way (e.g. ``myapp.settings``).
A bad value raises :class:`SettingsError` naming the setting (the CLI exits 2).

A secret (a URL that may carry a password) is declared with ``secret=True``:
it may instead be given as a file, ``<NAME>_FILE`` (container secrets), which
:meth:`Settings.current` reads again whenever a connection is made, so a
rotated password needs no restart; the repr of a settings object shows every
secret through :func:`worker.redact.redact`.

The framework that reads, checks and tables the declarations is
:mod:`worker.settings_framework`, their parsers :mod:`worker.setting_parsers`;
the names an application's settings use from both are importable from here too.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from re import Pattern
from typing import Any
from urllib.parse import parse_qs, urlparse

from worker.errors import SettingsError
from worker.redact import parse_patterns
from worker.setting_parsers import (
    ARCHIVE_OFF,
    archive_url,
    as_is,
    choice,
    default_worker_name,
    int_between,
    metric_name,
    module_list,
    non_negative_int,
    optional_int_at_least,
    positive_float,
    positive_int,
    readable_file,
    retention,
    served_queues,
    time_zone,
    url,
    worker_name,
)
from worker.settings_framework import (
    Setting,
    current,
    declared,
    from_env,
    raw_value,
    setting,
    settings_help,
    settings_markdown,
    settings_repr,
)
from worker.store.queues import Served

__all__ = [  # the declarations here; the rest for the settings of libraries and applications
    "SETTINGS",
    "Setting",
    "Settings",
    "SettingsError",
    "check_tls",
    "choice",
    "declared",
    "from_env",
    "positive_float",
    "setting",
    "settings_help",
    "settings_markdown",
    "settings_repr",
    "time_zone",
    "url",
]

DEAD_HARD_MAXLEN_FACTOR = 10
"""``DEAD_HARD_MAXLEN`` left empty is this many times ``DEAD_MAXLEN``."""


SOCKET_TIMEOUT_HELP = (
    "longest wait for Redis's reply (a blocking read's included: above BLOCK_MS) before the connection counts as "
    "lost and is made again: a half-open connection is seen within this, whatever redis-py's default"
)
HEALTH_CHECK_HELP = "a pooled connection idle this long is checked with a PING before its next command"


def check_read_timeout(block_ms: int, socket_timeout_s: float) -> None:
    """A blocking read must end (after ``BLOCK_MS``) before the socket timeout counts it lost."""
    if block_ms / 1000 >= socket_timeout_s:
        raise SettingsError(
            f"BLOCK_MS={block_ms} is not below REDIS_SOCKET_TIMEOUT_S={socket_timeout_s:g} s: every blocking read "
            f"would time out; set REDIS_SOCKET_TIMEOUT_S above BLOCK_MS / 1000 (e.g. {block_ms / 1000 + 4:g})"
        )


_QUEUES_HELP = (
    "the named queues this worker serves, with weights: name[:weight],... e.g. critical:6,default:3,bulk:1 "
    "(no weight: 1); each queue's share of starts under saturation follows its weight; empty: default alone"
)
_ORDER_HELP = (
    "weighted: each served queue gets its weight's share of starts; strict: a queue is read only while "
    "every queue before it in WORKER_QUEUES has nothing ready"
)


@dataclass(frozen=True)
class RedisTimeouts:
    """The worker's own timeouts for Redis (:func:`worker.store.connection.network_options`), a base of
    :class:`Settings`; checked against ``BLOCK_MS`` where the worker connects (:func:`check_read_timeout`)."""

    redis_socket_timeout_s: float = setting("REDIS_SOCKET_TIMEOUT_S", "5", positive_float, SOCKET_TIMEOUT_HELP)
    redis_connect_timeout_s: float = setting(
        "REDIS_CONNECT_TIMEOUT_S", "5", positive_float, "longest wait for a new connection to Redis"
    )
    redis_health_check_s: float = setting("REDIS_HEALTH_CHECK_S", "5", positive_float, HEALTH_CHECK_HELP)


def check_tls(settings: Settings) -> None:
    """``REQUIRE_TLS=on``: refuse, in one line, a Redis URL without TLS or without verification,
    and a PostgreSQL URL whose ``sslmode`` is not ``verify-full``."""
    if settings.redis_url:
        parsed = urlparse(settings.redis_url)
        if parsed.scheme != "rediss":
            raise SettingsError(
                f"REQUIRE_TLS=on but REDIS_URL is {parsed.scheme}://...; use rediss:// (with REDIS_CA_FILE)"
            )
        if parse_qs(parsed.query).get("ssl_cert_reqs", [""])[0].lower() in ("none", "optional"):
            raise SettingsError(
                "REQUIRE_TLS=on but REDIS_URL has ssl_cert_reqs=none (no certificate check); remove it "
                "and set REDIS_CA_FILE"
            )
    for env, value in (("DATABASE_URL", settings.database_url), ("ARCHIVE_URL", settings.archive_url)):
        if value and value != ARCHIVE_OFF:
            mode = parse_qs(urlparse(value).query).get("sslmode", ["prefer (the default)"])[0]
            if mode != "verify-full":
                raise SettingsError(
                    f"REQUIRE_TLS=on but {env} has sslmode={mode}; add ?sslmode=verify-full&sslrootcert=<CA file>"
                )


def check_combinations(settings: Settings) -> None:
    """The checks no single setting can make: the hard ceiling against the cap, TLS files against the URL,
    and ``REQUIRE_TLS`` (:func:`check_tls`)."""
    if settings.dead_hard_maxlen and settings.dead_hard_maxlen < settings.dead_maxlen:
        raise SettingsError(
            f"DEAD_HARD_MAXLEN={settings.dead_hard_maxlen} is below DEAD_MAXLEN={settings.dead_maxlen}; "
            "the hard ceiling must be at least the cap (leave it empty for 10 x DEAD_MAXLEN)"
        )
    tls_files = settings.redis_ca_file or settings.redis_cert_file
    if tls_files and settings.redis_url and not settings.redis_url.startswith("rediss:"):
        raise SettingsError(
            "REDIS_CA_FILE or REDIS_CERT_FILE is set but REDIS_URL is not rediss://; use rediss:// for TLS"
        )
    if settings.require_tls:
        check_tls(settings)


SHUTDOWN_GRACE_HELP = "on SIGTERM, how long running jobs may take to finish"
STOP_GRACE_HELP = (
    "a handler told to stop (its timeout, a cancel, the end of SHUTDOWN_GRACE_S) has this long to do so: "
    'then a handler with isolation="process" is killed, and a stopping worker gives back what still runs'
)


@dataclass(frozen=True, repr=False)
class Settings(RedisTimeouts):
    """The worker's configuration; build it with :meth:`from_env`."""

    redis_url: str = setting(
        "REDIS_URL",
        "",
        url("redis", "rediss", "unix"),
        "Redis/Valkey URL (redis://, rediss:// for TLS, unix://); empty: the embedded server, only when no "
        "server URL is set at all and the embedded extra is installed",
        secret=True,
    )
    redis_ca_file: str = setting(
        "REDIS_CA_FILE",
        "",
        readable_file,
        "CA certificate(s) (PEM) that a rediss:// server's certificate must chain to",
    )
    redis_cert_file: str = setting(
        "REDIS_CERT_FILE",
        "",
        readable_file,
        "client certificate (PEM) for a server that asks for one (tls-auth-clients)",
    )
    redis_key_file: str = setting("REDIS_KEY_FILE", "", readable_file, "the client certificate's private key (PEM)")
    require_tls: bool = setting(
        "REQUIRE_TLS",
        "off",
        lambda n, r: choice("on", "off")(n, r) == "on",
        "on: refuse a Redis URL other than rediss://, ssl_cert_reqs=none, and a PostgreSQL URL whose sslmode "
        "is not verify-full",
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
        "PostgreSQL URL (add ?sslmode=verify-full&sslrootcert=CA for TLS); empty: the embedded PostgreSQL, only "
        "when no server URL is set at all",
        secret=True,
    )
    worker_name: str = setting("WORKER_NAME", "", worker_name, "consumer name in the group; empty: <host>-<pid>")
    concurrency: int = setting("WORKER_CONCURRENCY", "8", positive_int, "job slots: the most jobs that run at once")
    prefetch: int = setting(
        "WORKER_PREFETCH",
        "100",
        int_between(0, 1000),
        "most entries a read fetches beyond the free slots (read ahead: as many as cover a round trip at "
        "the current rate, none for slow jobs); 0: never more than the free slots",
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
    queues: tuple[Served, ...] = setting("WORKER_QUEUES", "", served_queues, _QUEUES_HELP)
    queue_order: str = setting("WORKER_QUEUE_ORDER", "weighted", choice("weighted", "strict"), _ORDER_HELP)
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
    unknown_kind_grace_s: float = setting(
        "UNKNOWN_KIND_GRACE_S",
        "600",
        positive_float,
        "a kind that a live worker declared within this long, or whose job carries v and has waited less, waits "
        "for a worker that runs it; past it, a kind no live worker declares is dead-lettered as unknown_kind",
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
        "(the embedded PostgreSQL when no server URL is set at all); off: no archive",
        secret=True,
    )
    archive_migrate: str = setting(
        "ARCHIVE_MIGRATE",
        "auto",
        choice("auto", "on", "off"),
        "on: a worker creates the archive's table at start; off: it checks that the table exists "
        "(`python -m worker migrate` creates it, as a role that may run DDL); auto: on for the embedded "
        "PostgreSQL (no ARCHIVE_URL nor DATABASE_URL), off otherwise",
    )
    archive_retention: tuple[tuple[str, int], ...] = setting(
        "ARCHIVE_RETENTION",
        "",
        retention,
        "how long the archive keeps rows of each status, by dead_at (and the operators' audit, actions=, by "
        "its time), e.g. dead=365d,replayed=30d,discarded=30d; a status not named, or empty: kept for ever",
    )
    reclaim_idle_ms: int = setting(
        "RECLAIM_IDLE_MS", "60000", positive_int, "idle time after which a pending entry is reclaimed"
    )
    reclaim_interval_s: float = setting(
        "RECLAIM_INTERVAL_S", "5", positive_float, "how often each worker looks for idle pending entries"
    )
    block_ms: int = setting("BLOCK_MS", "1000", positive_int, "XREADGROUP block timeout")
    shutdown_grace_s: float = setting("SHUTDOWN_GRACE_S", "30", positive_float, SHUTDOWN_GRACE_HELP)
    stop_grace_s: float = setting("STOP_GRACE_S", "2", positive_float, STOP_GRACE_HELP)
    max_field_bytes: int = setting(
        "MAX_FIELD_BYTES", "65536", positive_int, "a job field larger than this is dead-lettered as malformed"
    )
    max_job_bytes: int = setting(
        "MAX_JOB_BYTES",
        "1048576",
        positive_int,
        "enqueue refuses a larger job; the worker dead-letters an entry larger than this and the 8 KiB a retry's "
        "`attempt_log` may add as oversized, each field cut to 1 KiB",
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
    metrics_port: int = setting("METRICS_PORT", "0", non_negative_int, "Prometheus endpoint port; 0: off")
    metrics_host: str = setting(
        "METRICS_HOST",
        "127.0.0.1",
        as_is,
        "address the metrics endpoint binds: loopback unless told otherwise (0.0.0.0 in a container)",
    )
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
    flow_retention_days: int = setting(
        "FLOW_RETENTION",
        "8",
        non_negative_int,
        "days the per-kind flow counters (opslib.throughput) are kept in Redis; 0: not counted",
    )
    log_format: str = setting("LOG_FORMAT", "text", choice("text", "json"), "text or json (one JSON object per line)")
    log_level: str = setting(
        "LOG_LEVEL",
        "INFO",
        choice("DEBUG", "INFO", "WARNING", "ERROR", case=str.upper),
        "DEBUG, INFO, WARNING or ERROR",
    )
    redact_patterns: tuple[Pattern[str], ...] = setting("REDACT_PATTERNS", "", parse_patterns, "more secrets (regexes)")
    data_dir: str = setting("WORKER_DATA_DIR", ".data", as_is, "where the embedded servers keep their files")
    secret_files: dict[str, str] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def __repr__(self) -> str:
        return settings_repr(self)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: str) -> Settings:
        """Read every setting from ``env`` (default ``os.environ``); ``overrides`` (by field name) win."""
        return from_env(cls, env, overrides)

    @classmethod
    def one(cls, field: str, env: Mapping[str, str] | None = None) -> Any:
        """One setting (by field name) read from ``env`` (default ``os.environ``) and checked, the others
        left unread: for a caller such as ``enqueue`` that needs a single value and must not fail on another."""
        spec = declared(cls)[field]
        raw, path = raw_value(spec, os.environ if env is None else env)
        return spec.parse(spec.file_env if path else spec.env, raw)

    def __post_init__(self) -> None:
        check_combinations(self)

    def current(self, name: str) -> str:
        """The secret setting ``name`` (``redis_url``, ``database_url``, ``archive_url``) as it is
        now: read again from its ``_FILE`` when it came from one."""
        return current(self, name)

    @property
    def servers_configured(self) -> bool:
        """True when any server URL is set (``ARCHIVE_URL=off`` names none): no embedded server then."""
        return bool(self.redis_url or self.database_url or self.archive_url not in ("", ARCHIVE_OFF))

    @property
    def worker_name_set(self) -> bool:
        """True when ``WORKER_NAME`` named this worker (not the ``<host>-<pid>`` default)."""
        return self.worker_name != default_worker_name()

    @property
    def archive_migrates(self) -> bool:
        """Whether a worker creates the archive's table at start (``ARCHIVE_MIGRATE``, ``auto`` resolved)."""
        if self.archive_migrate == "auto":
            return not self.archive_url and not self.database_url
        return self.archive_migrate == "on"

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
