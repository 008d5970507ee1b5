"""The ``/metrics`` HTTP endpoint: a few threads whatever the number of connections.

prometheus_client's server (and ``ThreadingHTTPServer``) keeps one thread per
open connection: 300 idle sockets made 302 threads in a worker. Here one
thread waits on every connection at once (``selectors``) and hands a
connection to a small pool only when its request has begun to arrive; the
pool reads the request with a timeout, answers and closes. A connection
that sends nothing is closed after ``idle_timeout_s``; past
``max_connections`` the oldest idle one is closed to admit the new one. So
idle or slow clients cost a file descriptor each, never a thread, and a
scrape is answered at once.

The endpoint binds ``METRICS_HOST`` (127.0.0.1 unless told otherwise).
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger("worker.metrics")

WORKERS = 4
READ_TIMEOUT_S = 5.0
IDLE_TIMEOUT_S = 30.0
MAX_CONNECTIONS = 1024
MAX_REQUEST_BYTES = 16384


class MetricsEndpoint:
    """Serves ``registry`` on ``host:port`` from :data:`WORKERS` threads and one selector thread."""

    def __init__(
        self,
        registry: CollectorRegistry,
        host: str,
        port: int,
        *,
        workers: int = WORKERS,
        read_timeout_s: float = READ_TIMEOUT_S,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.registry = registry
        self.read_timeout_s = read_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.max_connections = max_connections
        self.listener = socket.create_server((host, port), backlog=128)
        self.listener.setblocking(False)
        self.address = self.listener.getsockname()[:2]
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.idle: dict[socket.socket, float] = {}  # connection -> when it was accepted (insertion order)
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="metrics")
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="metrics-accept", daemon=True)

    def start(self) -> MetricsEndpoint:
        self.thread.start()
        return self

    def close(self) -> None:
        """Stop accepting, close every connection and wait for the threads (a second or so at most)."""
        self.stopping.set()
        if self.thread.ident is None:  # never started: no thread watches the sockets to close them
            self._close_sockets()
        else:
            self.thread.join(timeout=5)
        self.pool.shutdown(wait=True, cancel_futures=True)

    def _watch(self) -> None:
        try:
            while not self.stopping.is_set():
                self._serve(self.selector.select(timeout=0.5))
                self._expire(time.monotonic() - self.idle_timeout_s)
        finally:
            self._close_sockets()

    def _close_sockets(self) -> None:
        for conn in list(self.idle):
            self._drop(conn)
        self.selector.close()
        self.listener.close()

    def _serve(self, ready: list[tuple[selectors.SelectorKey, int]]) -> None:
        """One select's events: accept on the listener; hand over each connection whose request began,
        unless accepting dropped it earlier in the same batch (the oldest idle one, to admit a new one past
        ``max_connections``): its socket is closed, and unregistering it again would end this thread."""
        for key, _events in ready:
            if key.fileobj is self.listener:
                self._accept()
            elif key.fileobj in self.idle:
                self._hand_over(key.fileobj)

    def _accept(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while True:
                conn, _peer = self.listener.accept()
                if len(self.idle) >= self.max_connections:
                    self._drop(next(iter(self.idle)))
                conn.setblocking(False)
                self.idle[conn] = time.monotonic()
                self.selector.register(conn, selectors.EVENT_READ)

    def _hand_over(self, conn: socket.socket) -> None:
        self.selector.unregister(conn)
        del self.idle[conn]
        self.pool.submit(self._answer, conn)

    def _expire(self, before: float) -> None:
        for conn, since in list(self.idle.items()):
            if since >= before:
                break
            self._drop(conn)

    def _drop(self, conn: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(conn)
        self.idle.pop(conn, None)
        conn.close()

    def _answer(self, conn: socket.socket) -> None:
        """Read one request (bounded in time and size), answer it and close the connection."""
        with conn:
            try:
                conn.settimeout(self.read_timeout_s)
                request = self._read_head(conn)
                if request is None:
                    return
                conn.sendall(self._response(request))
            except OSError:
                return  # the client went away or was too slow: nothing to answer
            except Exception:
                log.exception("The metrics endpoint failed to answer a request.")

    @staticmethod
    def _read_head(conn: socket.socket) -> bytes | None:
        data = b""
        while b"\r\n\r\n" not in data and b"\n\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                return None
            data += chunk
            if len(data) > MAX_REQUEST_BYTES:
                return None
        return data.split(b"\n", 1)[0]

    def _response(self, request_line: bytes) -> bytes:
        parts = request_line.split()
        method = parts[0] if parts else b""
        path = parts[1].split(b"?", 1)[0] if len(parts) > 1 else b""
        if method not in (b"GET", b"HEAD"):
            return _http(405, b"text/plain", b"only GET\n")
        if path == b"/favicon.ico":
            return _http(404, b"text/plain", b"not found\n")
        body = generate_latest(self.registry)
        return _http(200, CONTENT_TYPE_LATEST.encode(), b"" if method == b"HEAD" else body, len(body))


def _http(status: int, content_type: bytes, body: bytes, length: int | None = None) -> bytes:
    reason = {200: b"OK", 404: b"Not Found", 405: b"Method Not Allowed"}[status]
    head = b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (
        status,
        reason,
        content_type,
        len(body) if length is None else length,
    )
    return head + body
