"""An enqueue's XADD written as RESP by the queue itself, onto the connection its client's pool keeps parked.

The read loop packs its XACK + XREADGROUP itself (:mod:`worker.loop.resp`); a producer that enqueues
from its request path deserves the same: redis-py 8's command layer (argument encoding, the retry
wrapper, the response callbacks) costs more per XADD than the packing and the round trip together.
The head of the command (``XADD <key> *``) is packed once per partition (:func:`xadd_head`, kept with
the queue's settings); a call packs only the job's fields (:func:`xadd_command`).

Only what a plain ``redis.Redis`` / ``redis.asyncio.Redis`` with a connection pool does takes this path
(:func:`packs_for`); a cluster client, a client holding a single connection, or anything else goes
through ``xadd`` as before. A reply the server refuses raises the same ``ResponseError`` subclasses as
redis-py's (its connection parses the reply). The connection is not checked out of the pool and released
at each call: one stays parked for these sends (:mod:`worker.store.parked`, which says why that is safe
with threads, tasks, fork, a pool's size and ``close()``). A connection lost midway is dropped and the command
goes through the client's ``execute_command`` once, so the client's own retry policy applies as it did
before (and, as before, a write whose reply was lost may be written again; handlers are idempotent).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import redis
import redis.asyncio

from worker.store import parked
from worker.store.reconnect import lost_connection

#: What a lost connection raises while a connection is taken: the command goes through the client's own
#: retrying path.
LOST = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


def bulk(value: str) -> bytes:
    """One RESP bulk string."""
    data = value.encode()
    return b"$%d\r\n%b\r\n" % (len(data), data)


def xadd_head(stream: str) -> bytes:
    """``XADD <stream> *`` packed, without the array's length (which counts the fields)."""
    return bulk("XADD") + bulk(stream) + bulk("*")


def xadd_command(head: bytes, fields: Mapping[str, str]) -> bytes:
    """The whole ``XADD <stream> * field value ...`` as RESP, from its packed ``head``."""
    parts = [b"*%d\r\n%b" % (3 + 2 * len(fields), head)]
    for name, value in fields.items():
        key, data = name.encode(), value.encode()
        parts.append(b"$%d\r\n%b\r\n$%d\r\n%b\r\n" % (len(key), key, len(data), data))
    return b"".join(parts)


def packs_for(client: Any) -> bool:
    """Whether ``client`` is a plain client drawing connections from a pool (then its XADD is packed here)."""
    return isinstance(client, redis.Redis | redis.asyncio.Redis) and client.connection is None


def command(*parts: str) -> bytes:
    """A whole command as RESP, from its parts (the guarded enqueue's EVALSHA: :mod:`worker.store.unique`)."""
    return b"*%d\r\n" % len(parts) + b"".join(bulk(part) for part in parts)


def send(client: Any, command: bytes, stream: str, fields: Mapping[str, str]) -> Any:
    """Send the packed XADD on a pooled connection and read its reply; on a lost connection, the client's
    ``xadd`` (with its retries)."""
    return send_or(client, command, lambda: client.xadd(stream, fields))


def send_or(client: Any, command: bytes, fallback: Callable[[], Any]) -> Any:
    """Send a packed command on the pool's parked connection (:mod:`worker.store.parked`) and read its
    reply; on a lost connection (:func:`worker.store.reconnect.lost_connection`), or a script the server
    does not hold (NOSCRIPT), ``fallback()``: the same command through the client (with its retries; a
    script's call loads it). Interrupted between send and reply (a signal, a cancellation), redis-py's
    connection closes itself, so no later command reads this one's reply."""
    pool = client.connection_pool
    try:
        conn = parked.take(pool)
    except LOST:
        return fallback()
    try:
        conn.send_packed_command((command,))
        return conn.read_response()
    except redis.exceptions.NoScriptError:
        pass  # the reply was read whole: the connection stays usable
    except Exception as exc:
        if not lost_connection(exc):
            raise
        conn.disconnect()
    finally:
        parked.give_back(pool, conn)
    return fallback()


async def send_async(client: Any, command: bytes, stream: str, fields: Mapping[str, str]) -> Any:
    """:func:`send` for a ``redis.asyncio`` client."""
    return await send_or_async(client, command, lambda: client.xadd(stream, fields))


async def send_or_async(client: Any, command: bytes, fallback: Callable[[], Awaitable[Any]]) -> Any:
    """:func:`send_or` for a ``redis.asyncio`` client."""
    pool = client.connection_pool
    try:
        conn = await parked.take_async(pool)
    except LOST:
        return await fallback()
    try:
        await write_async(conn, command)
        return await conn.read_response()
    except redis.exceptions.NoScriptError:
        pass  # the reply was read whole: the connection stays usable
    except Exception as exc:
        if not lost_connection(exc):
            raise
        await conn.disconnect()
    finally:
        await parked.give_back_async(pool, conn)
    return await fallback()


async def write_async(conn: Any, command: bytes) -> None:
    """Write a packed command on an asyncio connection: what ``send_packed_command`` does, without its
    ``asyncio.wait_for`` around a write that is done at once.

    ``send_packed_command`` runs every write under ``wait_for(..., socket_timeout)``, which in Python 3.11
    makes a task and two more turns of the loop: 15 of an ``enqueue_async``'s 45 µs. A command of a few
    hundred bytes is taken by the socket at once, so it is written on the connection's stream and waited
    for (``drain``, under the socket timeout) only when the transport kept some of it. A connection that
    is not open, or a redis-py without the stream attribute, goes through ``send_packed_command``
    (connecting first); the health check (a PING once ``health_check_interval`` has passed) runs as there.
    A failed write shows as a lost connection at the read; interrupted midway, the connection is closed,
    so no later command reads a reply that is not its own."""
    if not conn.is_connected or getattr(conn, "_writer", None) is None:
        await conn.send_packed_command(command)
        return
    await conn.check_health()
    writer = conn._writer  # after the health check, which may have connected again
    try:
        writer.write(command)
        if writer.transport.get_write_buffer_size():
            await asyncio.wait_for(writer.drain(), conn.socket_timeout)
    except BaseException:
        await conn.disconnect(nowait=True)
        raise
