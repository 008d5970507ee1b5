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

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import redis
import redis.asyncio

from worker.store import parked
from worker.store.async_round_trip import round_trip
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


async def send_or_async(client: Any, command: bytes, fallback: Callable[[], Awaitable[Any]]) -> Any:
    """:func:`send_or` for a ``redis.asyncio`` client, its round trip that of
    :func:`worker.store.async_round_trip.round_trip`."""
    pool = client.connection_pool
    conn = parked.take_parked_async(pool)
    if conn is None:
        try:
            conn = await parked.take_async(pool)
        except LOST:
            return await fallback()
    try:
        return await round_trip(conn, command)
    except redis.exceptions.NoScriptError:
        pass  # the reply was read whole: the connection stays usable
    except Exception as exc:
        if not lost_connection(exc):
            raise
        await conn.disconnect()
    finally:
        if not parked.park_async(pool, conn):
            await pool.release(conn)
    return await fallback()
