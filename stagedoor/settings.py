"""Stagedoor's own settings, declared like the worker's (one field each).

The queue core knows nothing of mail or Payrail: these are read by Stagedoor's
lifespan (:mod:`stagedoor.kinds`) and listed by ``python -m stagedoor --help``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from worker.settings import choice, from_env, positive_float, setting, settings_repr, url


@dataclass(frozen=True, repr=False)
class StagedoorSettings:
    """The application's configuration; build it with :meth:`from_env`."""

    mail_api_url: str = setting(
        "MAIL_API_URL",
        "",
        url("http", "https"),
        "the mail provider's API (send_email, send_reminder); make run: a stand-in",
        secret=True,
    )
    payrail_url: str = setting(
        "PAYRAIL_URL",
        "",
        url("http", "https"),
        "Payrail's API (reconcile_payments); make run: a stand-in",
        secret=True,
    )
    db_pool_timeout_s: float = setting(
        "DB_POOL_TIMEOUT_S",
        "30",
        positive_float,
        "how long a job waits for a PostgreSQL connection before its attempt fails",
    )
    migrate: str = setting(
        "STAGEDOOR_MIGRATE",
        "auto",
        choice("auto", "on", "off"),
        "on: a worker creates Stagedoor's tables at start; off: it checks that they exist "
        "(`python -m stagedoor migrate` creates them, as a role that may run DDL); auto: on for the embedded "
        "PostgreSQL (no DATABASE_URL), off otherwise",
    )

    def migrates(self, database_url_set: bool) -> bool:
        """Whether a worker creates the tables at start (``STAGEDOOR_MIGRATE``, ``auto`` resolved)."""
        return self.migrate == "on" or (self.migrate == "auto" and not database_url_set)

    secret_files: dict[str, str] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def __repr__(self) -> str:
        return settings_repr(self)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: str) -> StagedoorSettings:
        return from_env(cls, env, overrides)
