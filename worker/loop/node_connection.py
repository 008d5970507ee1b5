"""One raw connection to the server that owns a key, for the read loop's packed commands.

The read loop writes XACK and XREADGROUP to one connection in one round trip
(:meth:`worker.loop.partition_reader.PartitionReader.read`), below redis-py's command layer. On a
single server that connection comes from the client's pool. On a cluster it
comes from the node serving the key's slot; when that node fails, or
answers ``MOVED`` / ``ASK`` after a failover or a reshard, the connection
is dropped, the cluster client relearns the topology, and the next
:meth:`NodeConnection.get` goes to the slot's new owner.
"""

from __future__ import annotations

import contextlib
from typing import Any

import redis.exceptions

from worker.store.connection import is_cluster
from worker.store.reconnect import lost_connection

#: Replies that mean "this node no longer serves the slot": relearn the topology and read again.
REDIRECTIONS: tuple[type[BaseException], ...] = (
    redis.exceptions.MovedError,
    redis.exceptions.AskError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ClusterDownError,
)


class NodeConnection:
    """A connection to the owner of ``key`` on ``client`` (asyncio, plain or cluster), kept between reads."""

    def __init__(self, client: Any, key: str) -> None:
        self.client = client
        self.key = key
        self.cluster = is_cluster(client)
        self._conn: Any = None
        self._node: Any = None

    @property
    def where(self) -> str:
        """``host:port`` of the node in use (for log lines), or "" on a single server."""
        return self._node.name if self._node is not None else ""

    async def get(self) -> Any:
        """The connection, taken from the pool (or the slot's node) on first use or after a loss."""
        if self._conn is None:
            if self.cluster:
                self._node = self.client.get_node_from_key(self.key)
                self._conn = self._node.acquire_connection()
            else:
                self._conn = await self.client.connection_pool.get_connection()
        return self._conn

    async def lost(self, exc: BaseException) -> None:
        """After a failed exchange: close the connection; on a cluster, drop it and relearn the slots."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        with contextlib.suppress(Exception):
            await conn.disconnect()
        if not self.cluster:
            self._conn = conn  # the pool's connection reconnects on its next command
            return
        self._node.release(conn)
        self._node = None
        if isinstance(exc, REDIRECTIONS) or lost_connection(exc):
            with contextlib.suppress(redis.exceptions.RedisError, redis.exceptions.RedisClusterException, OSError):
                await self.client.nodes_manager.initialize()

    async def release(self) -> None:
        """Give the connection back (on stop)."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self.cluster:
            self._node.release(conn)
            self._node = None
        else:
            await self.client.connection_pool.release(conn)


def describe(exc: BaseException) -> str:
    """An error for a log line: its message, or its type when the message is empty."""
    return str(exc) or type(exc).__name__
