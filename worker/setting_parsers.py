"""The parsers of settings: each turns a setting's text into its value, or refuses in one line naming it.

Used by the declarations (:mod:`worker.settings`, an application's own such
as ``myapp.settings``) through :func:`worker.settings_framework.setting`.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable
from urllib.parse import urlparse
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from worker.errors import SettingsError
from worker.redact import redact
from worker.settings_framework import Parser
from worker.store.queues import Served, parse_served

ARCHIVE_OFF = "off"
"""``ARCHIVE_URL=off``: no archive; the dead stream's cap evicts (and counts) as it did before."""


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


RETENTION_KEYS = ("dead", "replayed", "discarded", "actions")
"""What ``ARCHIVE_RETENTION`` names: the archive's rows of each status, and the operators' audit."""
_AGE_UNITS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}


def retention(name: str, raw: str) -> tuple[tuple[str, int], ...]:
    """``status=age`` pairs (``dead=365d,replayed=30d``; ages in d, h, m or s) as (key, seconds); empty: ()."""
    ages: dict[str, int] = {}
    for pair in filter(None, (part.strip() for part in raw.split(","))):
        key, _, age = (word.strip() for word in pair.partition("="))
        match = re.fullmatch(r"([0-9]+)([dhms])", age)
        if key not in RETENTION_KEYS or not match or key in ages:
            raise SettingsError(
                f"{name}={raw!r}: {pair!r} is not one of {', '.join(RETENTION_KEYS)} (each once) = an age "
                "in d, h, m or s; e.g. dead=365d,replayed=30d,discarded=30d"
            )
        ages[key] = int(match[1]) * _AGE_UNITS[match[2]]
    return tuple(ages.items())


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


def served_queues(name: str, raw: str) -> tuple[Served, ...]:
    """``WORKER_QUEUES``: the queues a worker serves with their weights (:func:`worker.store.queues.parse_served`)."""
    try:
        return parse_served(raw)
    except ValueError as exc:
        raise SettingsError(str(exc).replace("WORKER_QUEUES", name, 1)) from None


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
