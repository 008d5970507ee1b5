"""One packed command's round trip on a ``redis.asyncio`` connection: written on its stream, the reply read
with the connection's own parser.

redis-py's ``send_packed_command`` runs every write under ``wait_for(..., socket_timeout)`` (in Python
3.11 a task and two more turns of the loop), and ``read_response`` every read under ``async_timeout`` (a
``Timeout`` object and a timer pushed on the loop's heap and cancelled again), through three more
coroutines: with them an ``enqueue_async`` cost 67 µs of CPU where the round trip on a bare asyncio stream
costs 13. :func:`round_trip` does what they do for one command, on the same objects, so the connection
stays redis-py's in every state:

- The write: a command of a few hundred bytes is taken by the socket at once; it is written on the
  connection's stream and waited for (``drain``, under the socket timeout) only when the transport kept
  some of it.
- The read: the parser's ``hiredis.Reader`` is fed from the connection's stream, so whatever it keeps
  buffered stays there for redis-py's next read. ``socket_timeout`` bounds the wait through one watch per
  connection (:class:`_Watch`): a read sets its deadline, and a timer is armed only when none is (it
  re-arms for a later deadline when it fires), instead of a timer pushed and cancelled at every read.
- Failures, as redis-py's: past the timeout a ``redis.exceptions.TimeoutError``, a reset or a closed
  socket a ``redis.exceptions.ConnectionError``, each with the connection closed, as after a cancellation
  or any other interruption, so no later command reads this one's reply; an error reply raises its
  ``ResponseError`` subclass (``NoScriptError``, ...) with the connection usable, one that says the
  connection is unusable (a ``ConnectionError`` reply) closes it first; a RESP3 push that comes first goes
  to the parser's push handler and the reply is read on; the health check's clock moves on after a reply.
- Anything else goes through redis-py's own calls: a connection not open (they connect it first), one
  whose health check is due (a PING), one whose parser is not hiredis's.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import hiredis
import redis.exceptions
from redis._parsers.hiredis import NOT_ENOUGH_DATA
from redis._parsers.socket import SERVER_CLOSED_CONNECTION_ERROR

#: How much one read asks of the stream (as redis-py's parser does).
READ_SIZE = 65536


class _Watch:
    """The deadline of a connection's read in progress, and the one timer that enforces it."""

    __slots__ = ("deadline", "expired", "handle", "task")

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None
        self.deadline = 0.0
        self.expired = False
        self.handle: asyncio.TimerHandle | None = None

    def start(self, loop: asyncio.AbstractEventLoop, timeout_s: float) -> asyncio.Task[Any] | None:
        """A read begins on the running task: its deadline is set, and the timer armed if none is."""
        self.task, self.deadline, self.expired = asyncio.current_task(), loop.time() + timeout_s, False
        if self.handle is None:
            self.handle = loop.call_at(self.deadline, self.check, loop)
        return self.task

    def check(self, loop: asyncio.AbstractEventLoop) -> None:
        """The timer: cancel the read past its deadline, or re-arm for a later one; none: the timer stops."""
        self.handle = None
        if self.task is None:
            return
        if loop.time() >= self.deadline:
            self.expired = True
            self.task.cancel()
        else:
            self.handle = loop.call_at(self.deadline, self.check, loop)


#: Connection -> its watch (weak: a connection dropped takes its watch along).
_WATCHES: weakref.WeakKeyDictionary[Any, _Watch] = weakref.WeakKeyDictionary()


def _lean(conn: Any) -> bool:
    """Whether ``conn`` is open, needs no health check now, and reads through hiredis."""
    parser = conn._parser
    return (
        getattr(conn, "_writer", None) is not None
        and isinstance(getattr(parser, "_reader", None), hiredis.Reader)
        and getattr(parser, "_connected", False)
        and not (conn.health_check_interval and asyncio.get_running_loop().time() > conn.next_health_check)
    )


async def round_trip(conn: Any, command: bytes) -> Any:
    """Write the packed ``command`` on ``conn`` and return its reply (see the module docstring)."""
    if not _lean(conn):
        await conn.send_packed_command(command)
        return await conn.read_response()
    writer = conn._writer
    try:
        writer.write(command)
        if writer.transport.get_write_buffer_size():
            await asyncio.wait_for(writer.drain(), conn.socket_timeout)
    except BaseException:
        await conn.disconnect(nowait=True)
        raise
    reply = await _reply(conn, conn._parser)
    if conn.health_check_interval:
        conn.next_health_check = asyncio.get_running_loop().time() + conn.health_check_interval
    failed = reply[0] if isinstance(reply, list) and reply else reply
    if isinstance(failed, redis.exceptions.ConnectionError):
        await conn.disconnect(nowait=True)
        raise failed
    if isinstance(reply, redis.exceptions.ResponseError):
        raise reply from None
    return reply


async def _reply(conn: Any, parser: Any) -> Any:
    """The next reply that is not a push, within ``socket_timeout``; any failure closes ``conn``."""
    reader, push = parser._reader, getattr(parser, "_hiredis_PushNotificationType", None)
    while True:
        reply = reader.gets()
        if reply is NOT_ENOUGH_DATA:
            reply = await _awaited(conn, reader, parser._stream)
        if push is None or not isinstance(reply, push):
            return reply
        await parser.handle_push_response(reply)  # as read_response does: handed on, and the reply read on


async def _awaited(conn: Any, reader: hiredis.Reader, stream: asyncio.StreamReader) -> Any:
    """Feed ``reader`` from ``stream`` until it holds a whole reply, within ``socket_timeout``."""
    watch = None
    if conn.socket_timeout is not None:
        watch = _WATCHES.get(conn) or _WATCHES.setdefault(conn, _Watch())
        task = watch.start(asyncio.get_running_loop(), conn.socket_timeout)
    try:
        while True:
            data = await stream.read(READ_SIZE)
            if not data:
                raise redis.exceptions.ConnectionError(SERVER_CLOSED_CONNECTION_ERROR)
            reader.feed(data)
            reply = reader.gets()
            if reply is not NOT_ENOUGH_DATA:
                return reply
    except asyncio.CancelledError:
        await conn.disconnect(nowait=True)
        if watch is not None and watch.expired and task is not None and task.uncancel() == 0:
            raise redis.exceptions.TimeoutError(f"Timeout reading from {conn._host_error()}") from None
        raise
    except OSError as exc:
        await conn.disconnect(nowait=True)
        raise redis.exceptions.ConnectionError(f"Error while reading from {conn._host_error()} : {exc.args}") from exc
    except BaseException:
        await conn.disconnect(nowait=True)
        raise
    finally:
        if watch is not None:
            watch.task = None
