"""What Stagedoor's handlers share while a worker runs: the pool, the HTTP client, the URLs.

A handler gets only its :class:`~worker.kinds.Job`, so the lifespan (see
:mod:`stagedoor.kinds`) opens these once and makes them current with
:func:`open_context`; handlers call :func:`current`. The context lives in a
ContextVar: the worker's tasks (and ``asyncio.to_thread``) inherit it, and a
test opens its own around the handler it calls.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import httpx
from psycopg_pool import AsyncConnectionPool

from stagedoor.errors import NotConfigured

#: Mail and Payrail calls that take longer than this raise (and the policy retries).
HTTP_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class StagedoorContext:
    """The open resources of one worker (or one test)."""

    pool: AsyncConnectionPool
    http: httpx.AsyncClient
    mail_api_url: str
    payrail_url: str

    def mail_url(self) -> str:
        if not self.mail_api_url:
            raise NotConfigured(
                "MAIL_API_URL is not set; point it at the mail provider's API, e.g. http://127.0.0.1:8025"
            )
        return self.mail_api_url.rstrip("/")

    def payrail(self) -> str:
        if not self.payrail_url:
            raise NotConfigured("PAYRAIL_URL is not set; point it at Payrail's API, e.g. http://127.0.0.1:8026")
        return self.payrail_url.rstrip("/")


_current: ContextVar[StagedoorContext] = ContextVar("stagedoor_context")


def current() -> StagedoorContext:
    """The context a handler runs in; a clear error when no worker or test opened one."""
    try:
        return _current.get()
    except LookupError:
        raise NotConfigured(
            "Stagedoor's handlers run inside its lifespan (WORKER_KINDS=stagedoor.kinds) "
            "or inside `async with open_context(database_url)` in a test"
        ) from None


@asynccontextmanager
async def open_context(
    database_url: str | Callable[[], str],
    *,
    mail_api_url: str = "",
    payrail_url: str = "",
    pool_size: int = 4,
    pool_timeout_s: float = 30.0,
    http_timeout_s: float = HTTP_TIMEOUT_S,
) -> AsyncIterator[StagedoorContext]:
    """Open a connection pool (autocommit; handlers open their own transactions) and an
    HTTP client, make them current, and close them afterwards. ``database_url`` may be a
    callable, asked at each new connection (a password rotated in ``DATABASE_URL_FILE``).

    A handler waits up to ``pool_timeout_s`` for a connection; while PostgreSQL is away
    that wait then fails the attempt (``PoolTimeout``) and the kind's retry policy decides.
    """
    pool = AsyncConnectionPool(
        database_url,
        min_size=1,
        max_size=max(1, pool_size),
        timeout=pool_timeout_s,
        kwargs={"autocommit": True},
        check=AsyncConnectionPool.check_connection,  # after a PostgreSQL restart, no dead connection is handed out
        open=False,
        name="stagedoor",
    )
    await pool.open(wait=True, timeout=30)
    try:
        async with httpx.AsyncClient(timeout=http_timeout_s) as http:
            ctx = StagedoorContext(pool, http, mail_api_url, payrail_url)
            token = _current.set(ctx)
            try:
                yield ctx
            finally:
                _current.reset(token)
    finally:
        await pool.close()
