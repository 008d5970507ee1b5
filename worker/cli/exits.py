"""The exit codes of ``python -m worker``: 0 success (and a clean stop on SIGTERM/SIGINT); 1 a failure at
run time (Redis unreachable, an unhealthy ``health``); 2 a bad setting or argument, named in one line."""

from __future__ import annotations

import sys
from collections.abc import Callable

import redis

from worker.embedded.servers import EmbeddedServerError
from worker.errors import SettingsError, WorkerError
from worker.redact import one_line, redact
from worker.store.roles import refused

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def one_line_errors(call: Callable[[], int]) -> int:
    """``call()``'s exit code; a bad setting (2), a server away or a failed start (1) is one line on stderr,
    redacted, never a traceback (``python -m worker`` and each forked worker process)."""
    try:
        return call()
    except SettingsError as exc:
        print(redact(f"error: {exc}"), file=sys.stderr)
        return EXIT_USAGE
    except (EmbeddedServerError, WorkerError) as exc:
        print(redact(f"error: {exc}"), file=sys.stderr)
        return EXIT_FAILED
    except redis.exceptions.NoPermissionError as exc:
        print(f"error: {refused(exc, 'worker')}", file=sys.stderr)
        return EXIT_FAILED
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        print(redact(f"error: Redis does not answer: {exc}"), file=sys.stderr)
        return EXIT_FAILED
    except redis.exceptions.RedisClusterException as exc:
        print(redact(f"error: the Redis Cluster cannot serve the queue: {exc}"), file=sys.stderr)
        return EXIT_FAILED
    except Exception as exc:
        if not _database_refused(exc):
            raise
        print(redact(f"error: cannot use PostgreSQL: {one_line(exc)}"), file=sys.stderr)
        return EXIT_FAILED


def _database_refused(exc: Exception) -> bool:
    """A psycopg ``OperationalError`` (a lifespan's PostgreSQL away at start, a wrong password...). psycopg is
    looked up, not imported: a worker without PostgreSQL never loads it, and then no error can be one."""
    psycopg = sys.modules.get("psycopg")
    return psycopg is not None and isinstance(exc, psycopg.OperationalError)
