"""The one connection a client's pool keeps parked for the queue's packed sends (:mod:`worker.store.packed`).

A checkout from redis-py 8's pool and its release cost about 8 µs a call (the pool's lock, its counters for
observability, and a ``select`` on the socket to check it), as much as the rest of an ``enqueue`` before the
socket. So the connection of a packed send is not handed back to the pool: it is parked, one per pool, and
the next send takes it again. What keeps that correct:

- Threads and tasks: :func:`take` removes the parked connection from its slot (one dict operation, atomic
  under the GIL) and :func:`give_back` parks it again, or releases it to the pool when another one was
  parked meanwhile. Two threads, or two tasks of one loop, never share a connection: whoever finds the slot
  empty checks one out of the pool as before.
- The pool's size: the parked connection stays checked out (one of the pool's ``max_connections``). A pool of
  fewer than :data:`PARK_FROM` connections, a blocking or sentinel pool (any subclass), or one with a
  client-side cache parks nothing: each send checks out and releases, as before.
- A lost connection: the caller disconnects it and gives it back; parked disconnected, it connects again
  at its next send (redis-py's ``send_packed_command``), and the send that lost it goes through the client's
  own retrying command (:func:`worker.store.packed.send_or`). A connection the server closed while it was
  parked fails its next read before the server ran anything, so the command is not written twice.
- Client close: ``close()`` / ``aclose()`` disconnect the pool's connections in use, the parked one too; it
  connects again if the client is used after.
- Fork: the child forgets every parked connection (its socket is the parent's); redis-py's pool resets itself.
- asyncio: a parked connection is tagged with the loop it was parked from; a send from another loop
  hands it back to the pool and checks one out (redis.asyncio's pool does not serve a second loop anyway:
  its connections belong to the loop that opened them).
- A dropped client: the slots hold pools and connections weakly (the pool holds its parked connection
  among those in use), so a pool no one else holds goes, its connection too.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from typing import Any

import redis
import redis.asyncio

#: The smallest ``max_connections`` of a pool that parks a connection (redis-py's default is 100).
PARK_FROM = 10

#: Pool -> a weak reference to its parked connection (sync), or (loop, that reference) (asyncio). Weak both
#: ways: the pool holds the connection (among those in use), and the connection may hold its pool.
_PARKED: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()

os.register_at_fork(after_in_child=_PARKED.clear)


def parks(pool: Any) -> bool:
    """Whether ``pool`` parks a connection for packed sends (see the module docstring)."""
    return (
        type(pool) in (redis.ConnectionPool, redis.asyncio.ConnectionPool)
        and pool.max_connections >= PARK_FROM
        and getattr(pool, "cache", None) is None
    )


def take(pool: Any) -> Any:
    """A connection for one packed command: the pool's parked one, else one checked out of the pool."""
    kept = _PARKED.pop(pool, None) if parks(pool) else None
    conn = None if kept is None else kept()
    return pool.get_connection() if conn is None else conn


def give_back(pool: Any, conn: Any) -> None:
    """Park ``conn`` again, or release it to the pool when it does not park or another one is parked."""
    kept = weakref.ref(conn)
    if not parks(pool) or _PARKED.setdefault(pool, kept) is not kept:
        pool.release(conn)


def take_parked_async(pool: Any) -> Any:
    """:func:`take` for a ``redis.asyncio`` pool, without waiting: the connection parked from the running
    loop, taken out of its slot; None when there is none (then :func:`take_async`). A plain function, not a
    coroutine: on every ``enqueue_async`` a coroutine's creation and await cost more than the lookup."""
    if not parks(pool):
        return None
    parked = _PARKED.get(pool)
    if parked is None or parked[0] is not asyncio.get_running_loop():
        return None
    conn = parked[1]()
    if conn is None or _PARKED.pop(pool, None) is not parked:
        return None
    return conn


async def take_async(pool: Any) -> Any:
    """A connection checked out of a ``redis.asyncio`` pool, when :func:`take_parked_async` had none; one
    parked from another loop is handed back to the pool first."""
    parked = _PARKED.pop(pool, None) if parks(pool) else None
    if parked is not None:
        loop, kept = parked
        conn = kept()
        if conn is not None and loop is asyncio.get_running_loop():
            return conn
        if conn is not None:
            await pool.release(conn)
    return await pool.get_connection()


def park_async(pool: Any, conn: Any) -> bool:
    """:func:`give_back` for a ``redis.asyncio`` pool, without waiting: whether ``conn`` is parked again;
    False when the pool takes it back (``await pool.release(conn)``)."""
    parked = (asyncio.get_running_loop(), weakref.ref(conn))
    return parks(pool) and _PARKED.setdefault(pool, parked) is parked
