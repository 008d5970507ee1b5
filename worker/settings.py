"""Worker settings: one frozen dataclass built from the environment at the edge.

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
"""

from __future__ import annotations

import dataclasses
import html
import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlparse
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from worker.errors import SettingsError
from worker.redact import redact

Parser = Callable[[str, str], Any]

ARCHIVE_OFF = "off"
"""``ARCHIVE_URL=off``: no archive; the dead stream's cap evicts (and counts) as it did before."""
DEAD_HARD_MAXLEN_FACTOR = 10
"""``DEAD_HARD_MAXLEN`` left empty is this many times ``DEAD_MAXLEN``."""
SOCKET_TIMEOUT_HELP = (
    "longest wait for Redis's reply (a blocking read's included: above BLOCK_MS) before the connection counts as "
    "lost and is made again: a half-open connection is seen within this, whatever redis-py's default"
)
HEALTH_CHECK_HELP = "a pooled connection idle this long is checked with a PING before its next command"


@dataclass(frozen=True)
class Setting:
    """One setting: where it is read from, its default, how it is parsed and what it means."""

    env: str
    default: str
    parse: Parser
    help: str
    secret: bool = False

    @property
    def file_env(self) -> str:
        """The variable naming a file that holds a secret setting's value (``REDIS_URL_FILE``)."""
        return f"{self.env}_FILE"


def setting(env: str, default: str, parse: Parser, help: str, *, secret: bool = False) -> Any:
    """A dataclass field read from the environment variable ``env`` (``default`` when unset); a
    ``secret`` one also from the file that ``<env>_FILE`` names."""
    return dataclasses.field(metadata={"setting": Setting(env, default, parse, help, secret)})


def read_secret_file(file_env: str, path: str) -> str:
    """The stripped content of the file ``file_env`` names, or one line saying why it cannot be read."""
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise SettingsError(
            f"{file_env}={path} cannot be read ({exc.strerror}); mount the secret there or unset {file_env}"
        ) from None


def raw_value(spec: Setting, env: Mapping[str, str]) -> tuple[str, str]:
    """``(value, file)``: the value of ``spec`` from ``env``, or from its file (then also the file's
    path, to read again later). Both set is refused: which one wins would be a guess."""
    path = env.get(spec.file_env, "").strip() if spec.secret else ""
    if not path:
        return env.get(spec.env, spec.default), ""
    if env.get(spec.env, ""):
        raise SettingsError(f"both {spec.env} and {spec.file_env} are set; set only one of them")
    return read_secret_file(spec.file_env, path), path


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


def int_between(minimum: int, maximum: int) -> Parser:
    """A parser of whole numbers from ``minimum`` to ``maximum`` that names the setting when it refuses."""
    at_least = int_at_least(minimum)

    def parse(name: str, raw: str) -> int:
        value = at_least(name, raw)
        if value > maximum:
            raise SettingsError(f"{name}={raw!r} must be <= {maximum}")
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
            hint = ""
            base = parsed.scheme.partition("+")[0]
            if base in schemes and base != parsed.scheme:
                hint = f" (a driver suffix such as {parsed.scheme}:// is for SQLAlchemy: write {base}://)"
            raise SettingsError(
                f"{name}={redact(raw)!r} is not a URL this worker can use; expected one of "
                + ", ".join(f"{s}://..." for s in schemes)
                + hint
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
        raise SettingsError(f"{exc}; or off (no archive), or empty (the database of DATABASE_URL)") from None


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


def readable_file(name: str, raw: str) -> str:
    """A path to a file this process can read (a certificate, a key); empty stays empty."""
    path = raw.strip()
    if path:
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise SettingsError(f"{name}={path} cannot be read ({exc.strerror}); give the path of a PEM file") from None
    return path


def module_list(_name: str, raw: str) -> tuple[str, ...]:
    return tuple(m.strip() for m in raw.split(",") if m.strip())


def default_worker_name() -> str:
    """This process's consumer name when ``WORKER_NAME`` is empty: ``<host>-<pid>``."""
    return f"{socket.gethostname()}-{os.getpid()}"


def worker_name(_name: str, raw: str) -> str:
    return raw.strip() or default_worker_name()


S = TypeVar("S")


SECRET_FILES = "secret_files"
"""The field of a settings class that keeps ``{field name: path}`` of the secrets read from files."""


def from_env(cls: type[S], env: Mapping[str, str] | None = None, overrides: Mapping[str, str] | None = None) -> S:
    """Build the settings dataclass ``cls`` from ``env`` (default ``os.environ``); ``overrides`` win."""
    env = os.environ if env is None else env
    overrides = overrides or {}
    values: dict[str, Any] = {}
    files: dict[str, str] = {}
    for name, spec in declared(cls).items():
        raw = overrides.get(name)
        if raw is None:
            raw, path = raw_value(spec, env)
            if path:
                files[name] = path
        values[name] = spec.parse(spec.file_env if name in files else spec.env, raw)
    if any(f.name == SECRET_FILES for f in dataclasses.fields(cls)):  # type: ignore[arg-type]
        values[SECRET_FILES] = files
    return cls(**values)


def declared(cls: type) -> dict[str, Setting]:
    """Field name -> :class:`Setting`, in declaration order."""
    return {f.name: f.metadata["setting"] for f in dataclasses.fields(cls) if "setting" in f.metadata}


def current(settings: Any, name: str) -> str:
    """The value of the secret setting ``name`` now: read again from its file when it came from one
    (a rotated password), else as it was given."""
    path = getattr(settings, SECRET_FILES).get(name)
    if not path:
        return str(getattr(settings, name))
    spec = declared(type(settings))[name]
    return str(spec.parse(spec.file_env, read_secret_file(spec.file_env, path)))


def settings_repr(settings: Any) -> str:
    """``Name(field=value, ...)`` with every secret setting redacted (the repr of a settings class)."""
    shown = []
    for name, spec in declared(type(settings)).items():
        value = getattr(settings, name)
        shown.append(f"{name}={redact(value) if spec.secret else value!r}")
    return f"{type(settings).__name__}({', '.join(shown)})"


def settings_help(cls: type, title: str = "settings (environment variables):") -> str:
    """The plain-text settings table (``--help``)."""
    specs = declared(cls).values()
    width = max(len(s.env) for s in specs)
    lines = [title]
    for s in specs:
        lines.append(f"  {s.env:<{width}}  default {s.default or '(empty)'}: {s.help}{file_note(s)}")
    return "\n".join(lines)


def settings_markdown(cls: type) -> str:
    """The settings table in Markdown, as the docs carry it (``<host>`` escaped, so that it shows)."""
    rows = ["| setting | default | meaning |", "| --- | --- | --- |"]
    for s in declared(cls).values():
        default = f"`{s.default}`" if s.default else "(empty)"
        meaning = html.escape(s.help + file_note(s), quote=False).replace("|", "/")
        rows.append(f"| `{s.env}` | {default} | {meaning} |")
    return "\n".join(rows)


def file_note(spec: Setting) -> str:
    """What the help says of a secret's ``_FILE`` form."""
    return f" (or {spec.file_env}: a file holding it, read again at each new connection)" if spec.secret else ""


def check_read_timeout(block_ms: int, socket_timeout_s: float) -> None:
    """A blocking read must end (after ``BLOCK_MS``) before the socket timeout counts it lost."""
    if block_ms / 1000 >= socket_timeout_s:
        raise SettingsError(
            f"BLOCK_MS={block_ms} is not below REDIS_SOCKET_TIMEOUT_S={socket_timeout_s:g} s: every blocking read "
            f"would time out; set REDIS_SOCKET_TIMEOUT_S above BLOCK_MS / 1000 (e.g. {block_ms / 1000 + 4:g})"
        )


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


@dataclass(frozen=True, repr=False)
class Settings:
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
    reclaim_idle_ms: int = setting(
        "RECLAIM_IDLE_MS", "60000", positive_int, "idle time after which a pending entry is reclaimed"
    )
    reclaim_interval_s: float = setting(
        "RECLAIM_INTERVAL_S", "5", positive_float, "how often each worker looks for idle pending entries"
    )
    block_ms: int = setting("BLOCK_MS", "1000", positive_int, "XREADGROUP block timeout")
    redis_socket_timeout_s: float = setting("REDIS_SOCKET_TIMEOUT_S", "5", positive_float, SOCKET_TIMEOUT_HELP)
    redis_connect_timeout_s: float = setting(
        "REDIS_CONNECT_TIMEOUT_S", "5", positive_float, "longest wait for a new connection to Redis"
    )
    redis_health_check_s: float = setting("REDIS_HEALTH_CHECK_S", "5", positive_float, HEALTH_CHECK_HELP)
    shutdown_grace_s: float = setting(
        "SHUTDOWN_GRACE_S", "30", positive_float, "on SIGTERM, how long running jobs may take to finish"
    )
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
        if self.dead_hard_maxlen and self.dead_hard_maxlen < self.dead_maxlen:
            raise SettingsError(
                f"DEAD_HARD_MAXLEN={self.dead_hard_maxlen} is below DEAD_MAXLEN={self.dead_maxlen}; "
                "the hard ceiling must be at least the cap (leave it empty for 10 x DEAD_MAXLEN)"
            )
        if (self.redis_ca_file or self.redis_cert_file) and self.redis_url and not self.redis_url.startswith("rediss:"):
            raise SettingsError(
                "REDIS_CA_FILE or REDIS_CERT_FILE is set but REDIS_URL is not rediss://; use rediss:// for TLS"
            )
        if self.require_tls:
            check_tls(self)
        check_read_timeout(self.block_ms, self.redis_socket_timeout_s)

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
