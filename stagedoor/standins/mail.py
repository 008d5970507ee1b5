"""The mail provider's stand-in: records messages, deduplicates by Idempotency-Key,
and can be told to answer 503 (or be slow) to the next N requests.

``POST /v1/messages`` with ``{"to", "subject", "text"}`` and an
``Idempotency-Key`` header: 202 ``{"id"}`` for a new message, 200 with the
same id (and ``"duplicate": true``) for a key seen before; 400 without a key.
Control: ``GET /_stand-in/messages``, ``POST /_stand-in/fail-next
{"count": N, "status": 503}``, ``POST /_stand-in/slow-next {"count": N,
"seconds": S}``; or the same from Python.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from stagedoor.standins.server import Request, Response, StandIn

log = logging.getLogger("stagedoor.standins.mail")


class MailStandIn(StandIn):
    name = "mail stand-in"

    def __init__(self, port: int = 0, host: str = "127.0.0.1") -> None:
        super().__init__(port, host)
        self._messages: list[dict[str, str]] = []
        self._by_key: dict[str, dict[str, str]] = {}
        self._fail_count = 0
        self._fail_status = 503
        self._slow_count = 0
        self._slow_s = 0.0
        self.answered: Counter[int] = Counter()
        """How many requests to /v1/messages got each status."""

    def fail_next(self, count: int, status: int = 503) -> None:
        """Answer ``status`` to the next ``count`` message requests (before looking at them)."""
        if count < 0 or not 400 <= status <= 599:
            raise ValueError(f"fail-next needs count >= 0 and a 4xx/5xx status, got {count}, {status}")
        with self.lock:
            self._fail_count, self._fail_status = count, status

    def slow_next(self, count: int, seconds: float) -> None:
        """Wait ``seconds`` before answering each of the next ``count`` message requests."""
        if count < 0 or seconds < 0:
            raise ValueError(f"slow-next needs count >= 0 and seconds >= 0, got {count}, {seconds}")
        with self.lock:
            self._slow_count, self._slow_s = count, seconds

    def messages(self) -> list[dict[str, str]]:
        """The messages accepted so far (each key once), oldest first."""
        with self.lock:
            return [dict(m) for m in self._messages]

    def route(self, request: Request) -> Response:
        if request.method == "POST" and request.path == "/v1/messages":
            return self._send(request)
        if request.method == "GET" and request.path == "/_stand-in/messages":
            return 200, self.messages()
        if request.method == "POST" and request.path == "/_stand-in/fail-next":
            body = request.json()
            self.fail_next(int(body.get("count", 1)), int(body.get("status", 503)))
            return 200, {"ok": True}
        if request.method == "POST" and request.path == "/_stand-in/slow-next":
            body = request.json()
            self.slow_next(int(body.get("count", 1)), float(body.get("seconds", 1)))
            return 200, {"ok": True}
        return 404, {"error": f"no route {request.method} {request.path}"}

    def _send(self, request: Request) -> Response:
        with self.lock:
            delay_s = 0.0
            if self._slow_count:
                self._slow_count -= 1
                delay_s = self._slow_s
        if delay_s:
            time.sleep(delay_s)
        with self.lock:
            if self._fail_count:
                self._fail_count -= 1
                status = self._fail_status
                self.answered[status] += 1
                log.warning(
                    "Mail stand-in answered %d to a send (told to; %d more will fail).", status, self._fail_count
                )
                return status, {"error": "the mail stand-in was told to fail this request"}
            result = self._accept(request)
            self.answered[result[0]] += 1
            return result

    def _accept(self, request: Request) -> Response:
        key = request.headers.get("Idempotency-Key", "")
        if not key:
            return 400, {"error": "an Idempotency-Key header is required"}
        seen = self._by_key.get(key)
        if seen is not None:
            return 200, {"id": seen["id"], "duplicate": True}
        body: Any = request.json()
        if not isinstance(body, dict) or not all(isinstance(body.get(f), str) for f in ("to", "subject", "text")):
            return 422, {"error": 'a message is {"to": str, "subject": str, "text": str}'}
        message = {
            "id": f"msg_{len(self._messages) + 1}",
            "key": key,
            "to": body["to"],
            "subject": body["subject"],
            "text": body["text"],
            "received_at": datetime.now(UTC).isoformat(),
        }
        self._messages.append(message)
        self._by_key[key] = message
        return 202, {"id": message["id"]}


def start_mail(port: int = 0, host: str = "127.0.0.1") -> MailStandIn:
    """Start the mail stand-in (on a free port unless given) and return it."""
    return MailStandIn(port, host).start()
