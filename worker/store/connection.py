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
from urllib.parse import urlsplit, urlunsplit

import redis
import redis.asyncio as aioredis
import redis.asyncio.cluster as aiocluster
import redis.cluster
import redis.exceptions

from worker.errors import SettingsError, WorkerError
from worker.settings import Settings
from worker.store.dev_stack import configured_or_running
from worker.store.keys import has_hash_tag
from worker.store.partitions import recorded_count

SLOTS = 16384

#: The clients this module makes, sync and asyncio.
SyncClient = redis.Redis | redis.cluster.RedisCluster
AsyncClient = aioredis.Redis | aiocluster.RedisCluster


class ClusterStateError(WorkerError):
    """The cluster cannot serve the queue: slots are not all covered, or it is down."""


def redis_url(settings: Settings) -> str:
    """``REDIS_URL``, or the embedded server a running ``make run`` started."""
    url = configured_or_running(settings.redis_url, "redis_url", settings.data_dir)
    if not url:
        raise SettingsError("REDIS_URL is not set and no embedded stack is running; set REDIS_URL or start `make run`")
    return url


def is_cluster(client: Any) -> bool:
    """True when ``client`` (sync or asyncio) is a cluster client."""
    return isinstance(client, redis.cluster.RedisCluster | aiocluster.RedisCluster)


def cluster_info(url: str, **client_kwargs: Any) -> dict[str, Any] | None:
    """Ask the server at ``url`` whether it runs in cluster mode (``INFO cluster``); for a
    cluster node, its ``CLUSTER INFO`` (state, slots served), else None."""
    with redis.Redis.from_url(url, **client_kwargs) as probe:
        if not int(probe.info("cluster").get("cluster_enabled", 0)):
            return None
        return dict(probe.cluster("info"))


def check_mode(settings: Settings, cluster: bool, url: str) -> None:
    """Refuse a server of the kind ``REDIS_MODE`` rules out, and keys that a cluster would split."""
    where = hide_password(url)
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


def hide_password(url: str) -> str:
    """``url`` without its password, for messages."""
    parts = urlsplit(url)
    if parts.password:
        return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@")))
    return url


def check_slots(info: dict[str, Any], url: str) -> None:
    """Refuse a cluster that does not serve every slot (``CLUSTER INFO`` of one node)."""
    ok = int(info.get("cluster_slots_ok", 0))
    if info.get("cluster_state") != "ok" or ok != SLOTS:
        raise ClusterStateError(
            f"the Redis Cluster at {hide_password(url)} is not serving every slot "
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
    url = url or redis_url(settings)
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
    keep = ("socket_timeout", "socket_connect_timeout", "username", "password", "ssl_ca_certs")
    return {k: v for k, v in client_kwargs.items() if k in keep}


def _cluster_kwargs(client_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The cluster client does its own retrying across nodes and does not take a health check."""
    return {k: v for k, v in client_kwargs.items() if k not in ("health_check_interval", "retry")}


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
