"""The client the settings call for: a single server or a Redis Cluster.

``REDIS_URL`` may name a single server or any node of a cluster. The server
is asked (``INFO cluster``: ``cluster_enabled``) and the matching redis-py
client is made: ``redis.Redis`` / ``redis.asyncio.Redis``, or
``redis.cluster.RedisCluster`` / ``redis.asyncio.cluster.RedisCluster``,
which follow ``MOVED`` / ``ASK`` redirections and topology changes
(failovers, resharding). ``REDIS_MODE`` (``auto`` by default) may insist on
one of the two; a server of the other kind is refused in one line.

A cluster is refused as well when it does not serve all 16384 slots, and when
the queue's keys would not share a slot per script: every Lua move names
several keys (``jobs`` with ``delayed``, ``jobs:dead``...), which a cluster
runs only when they hash to one slot. With one partition that takes a hash
tag in ``QUEUE_PREFIX`` (``{jobs}:``); with ``QUEUE_PARTITIONS`` > 1
every partition has a tag of its own (:mod:`worker.store.keys`, :mod:`worker.store.partitions`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import redis
import redis.asyncio as aioredis
import redis.asyncio.cluster as aiocluster
import redis.cluster
import redis.exceptions
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.credentials import CredentialProvider

from worker.errors import SettingsError, WorkerError
from worker.redact import redact
from worker.settings import Settings, check_read_timeout
from worker.store.dev_stack import configured_or_running
from worker.store.keys import has_hash_tag
from worker.store.partitions import recorded_count

SLOTS = 16384

#: No ``CLIENT SETINFO`` on connecting: the Redis roles (:mod:`worker.store.roles`) would have to allow
#: ``client|setinfo``, a rule Redis 7.0 refuses as unknown, and a denial there fills ``ACL LOG``.
QUIET: dict[str, Any] = {"driver_info": None}


def network_options(settings: Settings) -> dict[str, Any]:
    """For an asyncio client (:func:`connect_async`): the worker's own timeouts
    (``REDIS_SOCKET_TIMEOUT_S``, ``REDIS_CONNECT_TIMEOUT_S``, ``REDIS_HEALTH_CHECK_S``) and TCP keepalive,
    so that a half-open connection (a load balancer or NAT table that forgot it, a frozen peer) is seen
    within seconds whatever redis-py's own defaults are (none before 8, 5 s since); and a command whose
    connection was just reset is sent again on a new one (three tries, 50 ms to 0.5 s apart), uvloop's
    closed transport included (a ``RuntimeError`` that redis-py does not count as a lost connection:
    :func:`worker.store.reconnect.lost_connection`). A ``BLOCK_MS`` not below the socket timeout is refused
    here, in one line."""
    check_read_timeout(settings.block_ms, settings.redis_socket_timeout_s)
    return {
        "socket_timeout": settings.redis_socket_timeout_s,
        "socket_connect_timeout": settings.redis_connect_timeout_s,
        "health_check_interval": settings.redis_health_check_s,
        "socket_keepalive": True,
        "retry": Retry(ExponentialBackoff(cap=0.5, base=0.05), 3),
        "retry_on_error": [redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, RuntimeError],
    }


#: The clients this module makes, sync and asyncio.
SyncClient = redis.Redis | redis.cluster.RedisCluster
AsyncClient = aioredis.Redis | aiocluster.RedisCluster


class ClusterStateError(WorkerError):
    """The cluster cannot serve the queue: slots are not all covered, or it is down."""


def redis_url(settings: Settings) -> str:
    """``REDIS_URL``, or the embedded server a running ``make run`` started."""
    url = configured_or_running(settings, "redis_url")
    if not url and settings.servers_configured:
        raise SettingsError("REDIS_URL is not set while another server URL is; set REDIS_URL (or REDIS_URL_FILE)")
    if not url:
        raise SettingsError("REDIS_URL is not set and no embedded stack is running; set REDIS_URL or start `make run`")
    return url


def is_cluster(client: Any) -> bool:
    """True when ``client`` (sync or asyncio) is a cluster client."""
    return isinstance(client, redis.cluster.RedisCluster | aiocluster.RedisCluster)


def cluster_info(url: str, **client_kwargs: Any) -> dict[str, Any] | None:
    """Ask the server at ``url`` whether it runs in cluster mode (``INFO cluster``); for a
    cluster node, its ``CLUSTER INFO`` (state, slots served), else None."""
    try:
        with redis.Redis.from_url(url, **client_kwargs) as probe:
            if not int(probe.info("cluster").get("cluster_enabled", 0)):
                return None
            return dict(probe.cluster("info"))
    except (TypeError, ValueError) as exc:
        # redis-py passes a query parameter it does not know on as a keyword, and fails on it here.
        raise SettingsError(f"REDIS_URL={redact(url)!r} cannot be used: {exc}") from None


def check_mode(settings: Settings, cluster: bool, url: str) -> None:
    """Refuse a server of the kind ``REDIS_MODE`` rules out, and keys that a cluster would split."""
    where = redact(url)
    if settings.redis_mode == "single" and cluster:
        raise SettingsError(
            f"REDIS_URL={where} names a Redis Cluster node but REDIS_MODE=single; "
            "set REDIS_MODE=cluster (or auto), or point REDIS_URL at a single server"
        )
    if settings.redis_mode == "cluster" and not cluster:
        raise SettingsError(
            f"REDIS_URL={where} names a single server (cluster_enabled:0) but REDIS_MODE=cluster; "
            "point REDIS_URL at a cluster node, or set REDIS_MODE=single (or auto)"
        )
    if cluster and settings.partitions == 1 and not has_hash_tag(settings.prefix):
        raise SettingsError(
            f"REDIS_URL={where} names a Redis Cluster and QUEUE_PREFIX={settings.prefix!r} has no hash tag, "
            "so the queue's keys would fall in different slots; set QUEUE_PREFIX={jobs}: (one slot) "
            "or QUEUE_PARTITIONS=3 (a slot per partition)"
        )


class FileCredentials(CredentialProvider):
    """The user and password of ``REDIS_URL_FILE``, read again for each new connection: a password
    rotated in the file (the ACL user holding the old and the new one for a while) needs no restart."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def get_credentials(self) -> tuple[str] | tuple[str, str]:
        parts = urlsplit(self.settings.current("redis_url"))
        password = unquote(parts.password or "")
        return (unquote(parts.username), password) if parts.username else (password,)

    async def get_credentials_async(self) -> tuple[str] | tuple[str, str]:
        return self.get_credentials()  # a small local file: no need to leave the loop


def without_userinfo(url: str) -> str:
    """``url`` with no user or password (they come from a credential provider instead)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def client_options(settings: Settings, url: str) -> tuple[str, dict[str, Any]]:
    """``(url, kwargs)`` for a client of ``url``: the TLS files of the settings (``REDIS_CA_FILE``,
    ``REDIS_CERT_FILE``, ``REDIS_KEY_FILE``) for a ``rediss://`` URL, and for ``REDIS_URL_FILE``'s URL
    a credential provider that reads the file again at each connection."""
    options: dict[str, Any] = {}
    if url.startswith("rediss:"):
        files = {
            "ssl_ca_certs": settings.redis_ca_file,
            "ssl_certfile": settings.redis_cert_file,
            "ssl_keyfile": settings.redis_key_file,
        }
        options.update({k: v for k, v in files.items() if v})
    parts = urlsplit(url)
    if "redis_url" in settings.secret_files and url == settings.redis_url and (parts.username or parts.password):
        options["credential_provider"] = FileCredentials(settings)
        url = without_userinfo(url)
    return url, options


def check_slots(info: dict[str, Any], url: str) -> None:
    """Refuse a cluster that does not serve every slot (``CLUSTER INFO`` of one node)."""
    ok = int(info.get("cluster_slots_ok", 0))
    if info.get("cluster_state") != "ok" or ok != SLOTS:
        raise ClusterStateError(
            f"the Redis Cluster at {redact(url)} is not serving every slot "
            f"(cluster_state:{info.get('cluster_state')}, {ok} of {SLOTS} slots ok); "
            "assign the missing slots or wait for the failover, then start again"
        )


def connect(settings: Settings | None = None, *, url: str | None = None, **client_kwargs: Any) -> Any:
    """A synchronous client for the settings (``Settings.from_env()`` when None): ``redis.Redis``
    for a single server, ``redis.cluster.RedisCluster`` for a cluster node.

    ``url`` overrides ``REDIS_URL``; ``client_kwargs`` go to the client (timeouts, retry, ...).
    The client is typed ``Any``: redis-py's reply types are unions of every shape a command can return.
    """
    settings = settings or Settings.from_env()
    url, options = client_options(settings, url or redis_url(settings))
    client_kwargs = {**QUIET, **options, **client_kwargs}
    info = cluster_info(url, **_probe_kwargs(client_kwargs))
    if info is None:
        check_mode(settings, False, url)
        return redis.Redis.from_url(url, **client_kwargs)
    check_slots(info, url)
    client = redis.cluster.RedisCluster.from_url(url, **_cluster_kwargs(client_kwargs))
    try:
        # A reader (opslib, a tool) follows the count the workers recorded on the queue, as it does
        # on a single server: partitions carry hash tags of their own, whatever QUEUE_PREFIX holds.
        recorded = recorded_count(client, settings.prefix) if settings.partitions == 1 else None
        check_mode(replace(settings, partitions=recorded) if recorded else settings, True, url)
    except BaseException:
        client.close()
        raise
    return client


async def connect_async(settings: Settings, url: str, **client_kwargs: Any) -> Any:
    """:func:`connect` for asyncio: ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster``."""
    url, options = client_options(settings, url)
    client_kwargs = {**QUIET, **options, **client_kwargs}
    info = cluster_info(url, **_probe_kwargs(client_kwargs))
    check_mode(settings, info is not None, url)
    if info is None:
        return aioredis.Redis.from_url(url, **client_kwargs)
    check_slots(info, url)
    client = aiocluster.RedisCluster.from_url(url, **_cluster_kwargs(client_kwargs))
    try:
        await client.initialize()
    except BaseException:
        await client.aclose()
        raise
    return client


def _probe_kwargs(client_kwargs: dict[str, Any]) -> dict[str, Any]:
    keep = (
        "socket_timeout",
        "socket_connect_timeout",
        "username",
        "password",
        "credential_provider",
        "protocol",
        "driver_info",
    )
    return {k: v for k, v in client_kwargs.items() if k in keep or k.startswith("ssl_")}


def _cluster_kwargs(client_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The cluster client does its own retrying across nodes and does not take a health check."""
    return {k: v for k, v in client_kwargs.items() if k not in ("health_check_interval", "retry", "retry_on_error")}


def owner_client(client: Any, key: str) -> Any:
    """The plain (sync) client of the server that owns ``key``: ``client`` itself on a single
    server, the slot's primary on a cluster. For raw commands below redis-py's command layer."""
    if not is_cluster(client):
        return client
    return client.get_redis_connection(client.get_node_from_key(key))


def on_owner(client: Any, key: str, call: Any, attempts: int = 3) -> Any:
    """``call(owner_client(client, key))``; on a cluster whose slot moved (MOVED / ASK, a failover),
    the topology is relearnt and the call made again, up to ``attempts`` times."""
    for attempt in range(attempts):
        try:
            return call(owner_client(client, key))
        except (redis.exceptions.MovedError, redis.exceptions.AskError, redis.exceptions.ConnectionError):
            if not is_cluster(client) or attempt == attempts - 1:
                raise
            client.nodes_manager.initialize()
    raise AssertionError("unreachable")
