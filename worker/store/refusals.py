"""When Redis says no: which errors mean "the server refuses writes for now", in words an operator reads.

A server at ``maxmemory`` with ``noeviction`` answers ``OOM``; one whose
snapshot fails with ``stop-writes-on-bgsave-error yes`` answers ``MISCONF``
(even to PING); a replica, or a primary demoted under a client, ``READONLY``;
an ACL change ``NOPERM``; a command can also time out. None of them says the
move was wrong: the same move lands once the server accepts writes again. The
loop keeps a decided outcome and retries it (:mod:`worker.loop.episode`);
``enqueue`` raises :class:`~worker.errors.QueueRefused` naming the reason.
"""

from __future__ import annotations

from types import TracebackType

import redis.exceptions

from worker.errors import QueueRefused
from worker.store.reconnect import lost_connection
from worker.store.roles import refused

#: Redis's error code -> what it means, for log lines and errors.
REASONS = {
    "OOM": "out of memory: used memory is above maxmemory and the policy evicts nothing",
    "MISCONF": "misconfigured persistence: a snapshot cannot be written and stop-writes-on-bgsave-error is yes",
    "READONLY": "read-only: the server is a replica (a failover demoted the primary?)",
    "NOPERM": "no permission: the user's ACL does not allow this command or key",
    "LOADING": "loading its dataset after a restart",
    "MASTERDOWN": "a replica whose primary is down",
    "BUSY": "busy running a script",
}


def refusal_code(exc: BaseException) -> str | None:
    """Redis's code for a refusal that passes (``OOM``, ``MISCONF``, ``READONLY``, ``NOPERM``, ...), ``timeout``
    for a command that timed out, or None for any other error (a lost connection, a bug)."""
    if isinstance(exc, QueueRefused):
        return exc.code
    if isinstance(exc, (redis.exceptions.TimeoutError, TimeoutError)):
        return "timeout"
    if not isinstance(exc, redis.exceptions.ResponseError):
        return None
    code = getattr(exc, "status_code", None)
    if not code:
        # A pipeline's error reads "Command # 1 (...) of pipeline caused error: MISCONF ..." (or: ("MISCONF ...",))
        message = str(exc).rpartition("caused error: ")[2].lstrip("(\"' ")
        code = message.split(" ", 1)[0]
    return code if code in REASONS else None


def describe_refusal(exc: BaseException) -> str:
    """``OOM (out of memory: ...)``; ``timeout (...)``; a lost connection's own message."""
    code = refusal_code(exc)
    if code == "timeout":
        return f"timeout ({exc or type(exc).__name__})"
    if code is not None:
        return f"{code} ({REASONS[code]})"
    return str(exc) or type(exc).__name__


def passes(exc: BaseException) -> bool:
    """True for an error after which the same write lands later: a refusal, a timeout, a lost connection
    (:func:`~worker.store.reconnect.lost_connection`: a reset or a closed transport too)."""
    return refusal_code(exc) is not None or lost_connection(exc)


class refused_as_queue_refused:
    """Turn a refusal inside the block into :class:`~worker.errors.QueueRefused`: "Redis refuses writes
    (OOM: out of memory ...); ``what``", one line naming the reason (for a missing permission, the command
    and the role that has it). Other errors pass unchanged.

    A class rather than a ``@contextmanager`` generator: every enqueue enters it, and a generator's
    context manager costs 2.5 µs a call against 0.4 µs."""

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if not isinstance(exc, redis.exceptions.ResponseError):
            return
        code = refusal_code(exc)
        if code is None:
            return
        if isinstance(exc, redis.exceptions.NoPermissionError):  # a missing permission: say which role has it
            raise QueueRefused(code, f"{refused(exc, 'worker')}; {self.what}") from exc
        raise QueueRefused(code, f"Redis refuses writes ({code}: {REASONS[code]}); {self.what}") from exc
