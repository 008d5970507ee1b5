"""What a lifespan sees of the worker it runs in: settings, clients, chores."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import redis.asyncio as aioredis

from worker.settings import Settings


@dataclass(frozen=True)
class Chore:
    """A named periodic task: ``run()`` every ``interval_s`` seconds, ±``jitter`` of it."""

    name: str
    interval_s: float
    run: Callable[[], Awaitable[float | None]]
    jitter: float = 0.1


@dataclass
class WorkerApp:
    """The running worker's shared parts, handed to each lifespan.

    ``redis_url`` is the configured or embedded server's URL (for clients of
    one's own, e.g. in a thread); ``database_url`` is the configured or embedded PostgreSQL ("" when no
    imported module needs one). ``burst`` is true under ``--burst``, where
    periodic chores such as the scheduler stay off so the queue can drain.
    """

    settings: Settings
    redis: aioredis.Redis
    redis_url: str
    database_url: str
    burst: bool = False
    chores: list[Chore] = field(default_factory=list)
    more_work: list[Callable[[], Awaitable[bool]]] = field(default_factory=list)

    def database_conninfo(self) -> str:
        """``database_url`` as it is now, for each new connection: read again from ``DATABASE_URL_FILE``
        when it came from one, so that a rotated password (``ALTER ROLE ... PASSWORD``) needs no restart.
        Give the method itself to a pool (psycopg_pool takes a callable conninfo)."""
        if self.database_url and self.database_url == self.settings.database_url:
            return self.settings.current("database_url")
        return self.database_url

    def archive_conninfo(self) -> str:
        """The archive's PostgreSQL as it is now: ``ARCHIVE_URL`` (read again from its file), else
        :meth:`database_conninfo`."""
        if self.settings.archive_url:
            return self.settings.current("archive_url")
        return self.database_conninfo()

    def add_chore(self, chore: Chore) -> None:
        """Run ``chore`` beside the consumer loop for the worker's lifetime."""
        self.chores.append(chore)

    def add_more_work(self, check: Callable[[], Awaitable[bool]]) -> None:
        """Tell ``--burst`` not to exit while ``check()`` is true (e.g. unpublished outbox rows)."""
        self.more_work.append(check)
