"""Where opslib finds its servers, and the translation of server errors.

Every public function takes an explicit client (``client=`` a
``redis.Redis``, ``conn=`` a psycopg connection or URL) and a key prefix
(``prefix=``). With none, opslib reads the environment the way the worker
does (``REDIS_URL``, ``DATABASE_URL``, ``QUEUE_PREFIX``, through
:class:`worker.settings.Settings`), and when no URL is set it looks for the
servers that ``make run`` started: ``worker.store.dev_stack.find_running_stack`` of the
data folder (``WORKER_DATA_DIR``, ``.data`` by default), searched from the
current folder upwards, so a notebook in ``notebooks/`` finds the stack of the
project folder without the analyst typing a URL.

Server errors become :class:`~opslib.errors.OpslibError` here, in one place:
an unreachable server names the URL tried and how to fix it; a Redis user
without permission names the action that was refused.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from opslib.errors import OpslibError
from worker.archive.table import TABLE as ARCHIVE_TABLE
from worker.errors import SettingsError
from worker.redact import one_line, redact
from worker.settings import Settings
from worker.store.connection import ClusterStateError, connect, is_cluster
from worker.store.dev_stack import configured_or_running
from worker.store.keys import Keys
from worker.store.partitions import keys_for, known_queues, recorded_count
from worker.store.queues import DEFAULT_QUEUE
from worker.store.roles import refused

#: A blip is retried twice within a second; a server that is away is reported at once, not after
#: redis-py's default of ten retries with backoff.
QUICK_RETRY = Retry(ExponentialBackoff(cap=0.5, base=0.05), 2)
HOW_TO_CONNECT = (
    "start the stack with `make run`, or set REDIS_URL (e.g. redis://127.0.0.1:6379/0), "
    "or pass client=redis.Redis.from_url(...)"
)


def settings() -> Settings:
    """The worker's settings from the environment (an invalid one is an :class:`OpslibError`)."""
    try:
        return Settings.from_env()
    except SettingsError as exc:
        raise OpslibError(f"invalid setting in the environment: {exc}") from None


def redis_url() -> str:
    """``REDIS_URL``, or the embedded server of a running ``make run``."""
    conf = settings()
    url = configured_or_running(conf, "redis_url")
    if not url and conf.servers_configured:
        raise OpslibError(
            "no Redis to talk to: REDIS_URL is not set while DATABASE_URL or ARCHIVE_URL is (a `make run` stack "
            f"is used only when no server URL is set at all); {HOW_TO_CONNECT}"
        )
    if not url:
        raise OpslibError(
            f"no Redis to talk to: REDIS_URL is not set and no `make run` stack is running; {HOW_TO_CONNECT}"
        )
    return url


def database_url() -> str:
    """``DATABASE_URL``, or the embedded PostgreSQL of a running ``make run``."""
    conf = settings()
    url = configured_or_running(conf, "database_url")
    if url:
        return url
    raise OpslibError(
        "no PostgreSQL to talk to: DATABASE_URL is not set and no `make run` stack is running; "
        "start the stack with `make run`, set DATABASE_URL (e.g. postgresql://postgres@127.0.0.1:5432/stagedoor), "
        "or pass conn="
    )


def archive_url() -> str | None:
    """The dead-letter archive's PostgreSQL: ``ARCHIVE_URL``, else ``DATABASE_URL`` or the
    ``make run`` stack's, as the workers resolve it; None with ``ARCHIVE_URL=off``."""
    conf = settings()
    if not conf.archive_on:
        return None
    url = conf.archive_url or configured_or_running(conf, "database_url")
    if url:
        return url
    raise OpslibError(
        "no archive to talk to: ARCHIVE_URL and DATABASE_URL are not set and no `make run` stack is running; "
        "set ARCHIVE_URL to the PostgreSQL the workers archive to (or ARCHIVE_URL=off where there is no "
        "archive), or pass conn="
    )


def readable_archive_url() -> str:
    """:func:`archive_url` for the functions that read the archive: ``ARCHIVE_URL=off`` is an
    :class:`OpslibError` there, since there is nothing to read."""
    url = archive_url()
    if url is None:
        raise OpslibError(
            "the dead-letter archive is off (ARCHIVE_URL=off), so there is no archive to read; "
            "dead_letters() shows what jobs:dead still holds. Unset ARCHIVE_URL (the archive then lives in "
            "DATABASE_URL) or set it to a PostgreSQL URL, or pass conn="
        )
    return url


def connect_postgres(
    url: str, *, autocommit: bool, failure: Callable[[str, psycopg.Error], str]
) -> psycopg.Connection[Any]:
    """A new psycopg connection to ``url``; when the server cannot be reached (or the URL is not one),
    an :class:`OpslibError` with ``failure(url without its password, the error)`` as its message, each
    caller saying what to do in its own words."""
    try:
        return psycopg.connect(url, connect_timeout=5, autocommit=autocommit)
    except psycopg.Error as exc:
        raise OpslibError(one_line(failure(redact(url), exc))) from None


@contextlib.contextmanager
def pg_session(conn: Any, default_url: Callable[[], str], setting: str) -> Iterator[psycopg.Connection[Any]]:
    """Yield a psycopg connection: ``conn`` itself, or one opened on a URL (``conn``, else ``default_url()``).

    A connection opened here is in autocommit mode (each statement commits,
    as in psql) and closed afterwards. An unreachable server is an
    :class:`OpslibError` naming the URL and ``setting`` (the variable that
    points elsewhere). A statement that fails on a connection the caller
    passed is rolled back, so the caller's connection stays usable.
    """
    if isinstance(conn, psycopg.Connection):
        try:
            yield conn
        except psycopg.Error:
            conn.rollback()
            raise
        return
    connection = connect_postgres(
        conn or default_url(),
        autocommit=True,
        failure=lambda shown, exc: (
            f"cannot reach PostgreSQL at {shown} ({str(exc).strip()}); start the stack with `make run` or set {setting}"
        ),
    )
    with connection:
        yield connection


def archive_hint(exc: psycopg.Error) -> str:
    """Why the archive's table is missing, when that is what a query on ``DATABASE_URL`` failed on."""
    if not (isinstance(exc, psycopg.errors.UndefinedTable) and f'"{ARCHIVE_TABLE}"' in str(exc)):
        return ""
    conf = settings()
    if not conf.archive_on:
        return f". The dead-letter archive is off (ARCHIVE_URL=off): there is no {ARCHIVE_TABLE} table"
    if conf.archive_url:
        return (
            ". The archive lives where ARCHIVE_URL points, not in DATABASE_URL's database: read it with "
            f"opslib.archive() and join in pandas, or leave ARCHIVE_URL empty to keep {ARCHIVE_TABLE} beside "
            "the application's tables"
        )
    return f". `python -m worker migrate` creates {ARCHIVE_TABLE} (the embedded stack's workers do at start)"


def queue_keys(prefix: str | None) -> Keys:
    """The key names for ``prefix``, or for ``QUEUE_PREFIX`` when it is None."""
    return Keys(settings().prefix if prefix is None else prefix)


def partitions(client: Any, keys: Keys) -> list[Keys]:
    """The keys of every partition of every named queue in use (``default`` first, then the others by name;
    :func:`worker.store.partitions.known_queues`), or of ``keys.queue`` alone when it names another: as many
    partitions as the workers recorded (``QUEUE_PARTITIONS`` of the environment when none did yet)."""
    count = recorded_count(client, keys.prefix) or settings().partitions
    queues = known_queues(client, keys.prefix) if keys.queue == DEFAULT_QUEUE else [keys.queue]
    try:
        return [part for queue in queues for part in keys_for(keys.prefix, count, queue)]
    except SettingsError as exc:
        raise OpslibError(str(exc)) from None


def describe(client: Any) -> str:
    """Where a client points, without its password (for error messages)."""
    if is_cluster(client):
        return f"the Redis Cluster of {client.get_default_node().name}"
    pool = client.connection_pool
    kwargs = pool.connection_kwargs
    if "path" in kwargs:
        return f"unix://{kwargs['path']}"
    scheme = "rediss" if issubclass(pool.connection_class, redis.SSLConnection) else "redis"
    return f"{scheme}://{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"


@contextlib.contextmanager
def redis_session(
    client: redis.Redis | None, prefix: str | None, action: str, needs: str = ""
) -> Iterator[tuple[Any, Keys]]:
    """Yield ``(client, keys)``: the given client, or one made from the environment and closed afterwards.

    The client is typed ``Any``: redis-py's reply types are unions of every
    shape a command can return, which its callers here parse anyway.

    ``action`` says what the caller does ("read the dead letters"), for the
    messages of the errors translated here; ``needs`` says which rights it needs (a move, for the
    operator role; none: a read, for the analyst role).
    """
    keys = queue_keys(prefix)
    own = client is None
    if client is None:
        url = redis_url()
        try:
            client = connect(settings(), url=url, socket_connect_timeout=5, socket_timeout=60, retry=QUICK_RETRY)
        except ValueError as exc:
            raise OpslibError(f"REDIS_URL={redact(url)!r} is not a Redis URL ({exc}); {HOW_TO_CONNECT}") from None
        except (SettingsError, ClusterStateError) as exc:
            raise OpslibError(str(exc)) from None
        except redis.exceptions.NoPermissionError as exc:
            role = "operator" if needs else "analyst"  # a move's user needs the operator's rights from the start
            raise OpslibError(refused(exc, role, f"connect to {action}")) from None
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            raise OpslibError(f"cannot reach Redis at {redact(url)} to {action} ({exc}); {HOW_TO_CONNECT}") from None
    try:
        yield client, keys
    except redis.exceptions.NoPermissionError as exc:
        hint = f"; {needs}" if needs else ""
        raise OpslibError(refused(exc, "operator" if needs else "analyst", action) + hint) from None
    except redis.exceptions.AuthenticationError as exc:
        raise OpslibError(
            f"Redis at {describe(client)} refused the login ({exc}); check the user and password"
        ) from None
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        raise OpslibError(f"cannot reach Redis at {describe(client)} to {action} ({exc}); {HOW_TO_CONNECT}") from None
    finally:
        if own:
            client.close()
