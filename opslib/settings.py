"""opslib's own settings, declared like the worker's (one field each, see :mod:`worker.settings`).

opslib reads the queue's settings (``REDIS_URL``, ``QUEUE_PREFIX``, ...) from
the worker's :class:`~worker.settings.Settings`; these are the analyst's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from worker.settings import from_env, setting, time_zone


@dataclass(frozen=True)
class OpslibSettings:
    """The analyst's preferences; build them with :meth:`from_env`."""

    display_tz: str = setting(
        "OPSLIB_TZ",
        "UTC",
        time_zone,
        "time zone opslib shows times in (tables, show(), the panel); the data stays in UTC",
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: str) -> OpslibSettings:
        return from_env(cls, env, overrides)
