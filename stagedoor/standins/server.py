"""The small HTTP server under each stand-in: JSON in, JSON out, one thread per request."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger("stagedoor.standins")


class Request:
    """What a stand-in's route sees of one request."""

    def __init__(self, method: str, target: str, headers: dict[str, str], body: bytes) -> None:
        parts = urlsplit(target)
        self.method = method
        self.path = parts.path
        self.query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        """The body as JSON; ValueError (a 400) when it is not."""
        return json.loads(self.body or b"null")


Response = tuple[int, Any]


class StandIn:
    """A real HTTP server on 127.0.0.1 (a free port unless given), served from a daemon thread.

    ``host`` is the address to bind: 127.0.0.1 here; 0.0.0.0 inside a container
    (compose.yaml), where the workers reach it by its service name.

    Subclasses implement :meth:`route`; a ValueError it raises becomes a 400
    with the message, so a wrong request says what was wrong.
    """

    name = "stand-in"

    def __init__(self, port: int = 0, host: str = "127.0.0.1") -> None:
        self.host = host
        self.server = ThreadingHTTPServer((host, port), self._handler_class())
        self.server.daemon_threads = True
        self.lock = threading.Lock()
        self._thread = threading.Thread(target=self.server.serve_forever, name=self.name, daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._thread.is_alive():
            self.server.shutdown()
            self._thread.join(5)
        self.server.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def route(self, request: Request) -> Response:
        raise NotImplementedError

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                request = Request(self.command, self.path, dict(self.headers.items()), self.rfile.read(length))
                try:
                    status, body = stand_in.route(request)
                except ValueError as exc:
                    status, body = 400, {"error": str(exc)}
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = _serve

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("%s: " + format, stand_in.name, *args)

        return Handler
