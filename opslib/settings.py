"""opslib's own settings, declared like the worker's (one field each, see :mod:`worker.settings`).

opslib reads the queue's settings (``REDIS_URL``, ``QUEUE_PREFIX``, ...) from
the worker's :class:`~worker.settings.Settings`; these are the analyst's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from worker.settings import SettingsError, from_env, setting, time_zone

#: What ``OPSLIB_TRACE_URL`` replaces with a trace id.
TRACE_ID_PLACEHOLDER = "{trace_id}"


def trace_url_template(name: str, raw: str) -> str:
    """Empty, or an http(s) URL holding ``{trace_id}`` (:mod:`opslib.trace_links`)."""
    value = raw.strip()
    if value and (TRACE_ID_PLACEHOLDER not in value or not value.lower().startswith(("https://", "http://"))):
        raise SettingsError(
            f"{name}={raw!r} is not a trace URL template; give an http(s) URL holding {TRACE_ID_PLACEHOLDER}, "
            f"e.g. https://tempo.example/trace/{TRACE_ID_PLACEHOLDER}"
        )
    return value


@dataclass(frozen=True)
class OpslibSettings:
    """The analyst's preferences; build them with :meth:`from_env`."""

    display_tz: str = setting(
        "OPSLIB_TZ",
        "UTC",
        time_zone,
        "time zone opslib shows times in (tables, show(), the panel); the data stays in UTC",
    )
    trace_url: str = setting(
        "OPSLIB_TRACE_URL",
        "",
        trace_url_template,
        "a dead letter's trace as a link in show(), the panel and the runbook: an http(s) URL template "
        "holding {trace_id}, e.g. https://tempo.example/trace/{trace_id}; empty: no link",
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: str) -> OpslibSettings:
        return from_env(cls, env, overrides)
