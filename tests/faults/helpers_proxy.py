"""A TCP proxy of the tests' own on loopback, between a worker and its Redis: what load balancers, NAT
tables and failovers do to a connection, on demand.

- ``delay_s``: each chunk waits this long before it is passed on (each direction, order kept).
- :meth:`Proxy.freeze`: every connection open now, and every one made until :meth:`Proxy.thaw`, stays
  open but passes nothing for ever: a half-open connection (the peer is gone, no FIN, no RST).
  Connections made after the thaw pass again; the frozen ones stay dead until their client drops them.
- :meth:`Proxy.reset`: every open connection is closed with an RST (``SO_LINGER`` 0), on both sides.

The proxy runs its own event loop in a thread of the test process; every method may be called from the
test's thread. :meth:`Proxy.stop` closes it all.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

CHUNK = 65536


class Link:
    """One client connection and its upstream connection."""

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter, frozen: bool) -> None:
        self.writers = (client, upstream)
        self.frozen = frozen


class Proxy:
    """Forward 127.0.0.1:``port`` to ``target_port`` (see the module docstring)."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.delay_s = 0.0
        self.frozen = False
        self.links: set[Link] = set()
        self.accepted = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy", daemon=True)
        self._thread.start()
        self._server = self._call(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port: int = self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _call(self, coro: Coroutine[Any, Any, T], timeout_s: float = 10.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        link = Link(writer, up_writer, self.frozen)
        self.links.add(link)
        try:
            await asyncio.gather(self._pump(reader, up_writer, link), self._pump(up_reader, writer, link))
        finally:
            self.links.discard(link)
            for end in link.writers:
                end.close()

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, link: Link) -> None:
        """Pass chunks on until either side closes; a frozen link swallows them (nothing passes, nothing
        closes)."""
        with contextlib.suppress(ConnectionError, OSError):
            while chunk := await source.read(CHUNK):
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                if link.frozen:
                    continue
                sink.write(chunk)
                await sink.drain()
        if not link.frozen:
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                sink.write_eof()

    def freeze(self) -> None:
        """Every connection open now or made until :meth:`thaw` goes half-open for good."""

        async def go() -> None:
            self.frozen = True
            for link in self.links:
                link.frozen = True

        self._call(go())

    def thaw(self) -> None:
        """New connections pass again (the frozen ones stay dead)."""

        async def go() -> None:
            self.frozen = False

        self._call(go())

    def reset(self) -> int:
        """Close every open connection with an RST on both sides; how many were reset."""

        async def go() -> int:
            links = list(self.links)
            for link in links:
                for end in link.writers:
                    sock = end.get_extra_info("socket")
                    if sock is not None:
                        with contextlib.suppress(OSError):
                            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    end.transport.abort()
                self.links.discard(link)
            return len(links)

        return self._call(go())

    def stop(self) -> None:
        """Close the listening socket and every connection; end the thread."""

        async def go() -> None:
            self._server.close()
            for link in list(self.links):
                for end in link.writers:
                    end.transport.abort()
            self.links.clear()
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            self._call(go())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
