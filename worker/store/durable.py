"""Writes that wait for replicas (``WAIT_REPLICAS``): the command, then ``WAIT``, on one connection.

Redis replicates asynchronously: a primary that dies a moment after it
answered may take the write with it, and its promoted replica never saw it.
``WAIT n timeout`` blocks until n replicas acknowledged every earlier write
*of the same connection*, so the write and its WAIT go together to the
primary that owns the key, on one connection, in one round trip: through a
pipeline of the plain client, or of the slot owner's client on a cluster
(the asyncio cluster client has no per-node client: a connection of the
owner's pool is used directly).

The command is sent as given (EVAL, not EVALSHA, for a script: nothing to
reload on a freshly promoted replica). When fewer replicas acknowledge
within ``WAIT_TIMEOUT_MS`` the write stands, and a warning says that a
failover could still lose it (at most one a minute).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis.exceptions

from worker.store.connection import is_cluster, on_owner

log = logging.getLogger("worker")

#: How long a write waits for its replicas before going on with a warning.
WAIT_TIMEOUT_MS = 1000
WARN_EVERY_S = 60.0
_last_warning = [0.0]

#: Replies of a cluster node that mean "ask another node"; the command did not run.
_MOVED = (redis.exceptions.MovedError, redis.exceptions.AskError, redis.exceptions.TryAgainError)


def _check(acked: Any, wanted: int, key: str) -> None:
    if int(acked) >= wanted:
        return
    now = time.monotonic()
    if now - _last_warning[0] >= WARN_EVERY_S:
        _last_warning[0] = now
        log.warning(
            "Only %s of WAIT_REPLICAS=%d replicas acknowledged the write to %s within %d ms; "
            "a failover of its primary now could lose it.",
            acked,
            wanted,
            key,
            WAIT_TIMEOUT_MS,
        )


def write_and_wait(client: Any, key: str, command: tuple[Any, ...], replicas: int) -> Any:
    """Run ``command`` (which writes ``key``) on a sync client, then WAIT for ``replicas``; its reply."""

    def run(owner: Any) -> Any:
        pipe = owner.pipeline(transaction=False)
        pipe.execute_command(*command)
        pipe.execute_command("WAIT", replicas, WAIT_TIMEOUT_MS)
        return pipe.execute()

    reply, acked = on_owner(client, key, run)
    _check(acked, replicas, key)
    return reply


async def write_and_wait_async(client: Any, key: str, command: tuple[Any, ...], replicas: int) -> Any:
    """:func:`write_and_wait` for an asyncio client (plain or cluster)."""
    if not is_cluster(client):
        pipe = client.pipeline(transaction=False)
        pipe.execute_command(*command)
        pipe.execute_command("WAIT", replicas, WAIT_TIMEOUT_MS)
        reply, acked = await pipe.execute()
        _check(acked, replicas, key)
        return reply
    for attempt in range(3):
        node = client.get_node_from_key(key)
        conn = node.acquire_connection()
        try:
            await conn.send_packed_command(conn.pack_commands([command, ("WAIT", replicas, WAIT_TIMEOUT_MS)]))
            try:
                reply = await conn.read_response()
            finally:
                acked = await conn.read_response()  # WAIT's reply comes whatever the command's was
        except _MOVED:
            if attempt == 2:
                raise
            await client.nodes_manager.initialize()
            continue
        except BaseException:
            await conn.disconnect()
            raise
        finally:
            node.release(conn)
        _check(acked, replicas, key)
        return reply
    raise AssertionError("unreachable")
