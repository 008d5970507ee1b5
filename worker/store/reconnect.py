"""Riding out a server that is away: the one rule for a lost connection, the one reconnect backoff, and a
call retried with it.

A reset, a closed transport, a timeout and a refused connection all mean the
same: the connection is lost (:func:`lost_connection`, the one test every
caller asks). The consumer loop, the outcome scripts, the drain on stop and
every chore then wait the same way: ``min(cap_s, base_s * 2**n)`` after the
n-th failure in a row, times a random factor in [0.5, 1] so that a fleet of
workers that lost Redis together does not come back in lockstep.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import redis.exceptions

T = TypeVar("T")

#: Errors that mean "Redis or PostgreSQL is away"; callers back off and retry quietly.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    ConnectionError,
    TimeoutError,
    OSError,
)


def lost_connection(exc: BaseException) -> bool:
    """True for :data:`CONNECTION_ERRORS`, and for the ``RuntimeError`` uvloop raises when redis-py writes to
    a connection whose node has just gone (a cluster pipeline during a failover: "unable to perform operation
    on <TCPTransport closed=True ...>; the handler is closed")."""
    if isinstance(exc, CONNECTION_ERRORS):
        return True
    return isinstance(exc, RuntimeError) and "closed=True" in str(exc) and "handler is closed" in str(exc)


@contextmanager
def unless_lost(*also: type[BaseException]) -> Iterator[None]:
    """Suppress a lost connection (:func:`lost_connection`) and the errors ``also`` inside the block: for
    best-effort writes (a goodbye, a lock's release) that expire or are redone anyway."""
    try:
        yield
    except Exception as exc:
        if not (lost_connection(exc) or isinstance(exc, also)):
            raise


BASE_S = 0.05
CAP_S = 5.0


def backoff_s(
    failures: int, *, base_s: float = BASE_S, cap_s: float = CAP_S, rng: random.Random | None = None
) -> float:
    """Seconds to wait after ``failures`` failures in a row (the first is 1): jittered, at most ``cap_s``."""
    bound = min(cap_s, base_s * 2 ** min(failures, 32))
    return bound * (rng or random).uniform(0.5, 1.0)


async def with_backoff(
    call: Callable[[], Awaitable[T]], *, attempts: int = 8, base_s: float = BASE_S, cap_s: float = CAP_S
) -> T:
    """``await call()``, calling it again after :func:`backoff_s` while the connection is away.

    The error of the last of ``attempts`` calls propagates; any other error at once.
    """
    for attempt in range(1, attempts):
        try:
            return await call()
        except Exception as exc:
            if not lost_connection(exc):
                raise
            await asyncio.sleep(backoff_s(attempt, base_s=base_s, cap_s=cap_s))
    return await call()
