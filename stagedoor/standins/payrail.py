"""Payrail's stand-in: serves a day's payments, page by page, from data it is given.

``GET /v1/payments?date=YYYY-MM-DD&page=N&per_page=M`` answers
``{"payments": [...], "page": N, "next_page": N+1 or null}``. The payments of
a day are given from Python (:meth:`PayrailStandIn.set_payments`) or by
``PUT /_stand-in/payments/YYYY-MM-DD`` with a JSON list; each is a
``{"reference", "amount", "currency", "status"}`` object.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date
from typing import Any

from stagedoor.standins.server import Request, Response, StandIn

MAX_PER_PAGE = 500


class PayrailStandIn(StandIn):
    name = "payrail stand-in"

    def __init__(
        self,
        payments: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
        port: int = 0,
        host: str = "127.0.0.1",
    ) -> None:
        super().__init__(port, host)
        self._days: dict[str, list[dict[str, Any]]] = {}
        for day, records in (payments or {}).items():
            self.set_payments(day, records)

    def set_payments(self, day: str, records: Sequence[Mapping[str, Any]]) -> None:
        """Replace what Payrail knows of ``day`` (``YYYY-MM-DD``)."""
        date.fromisoformat(day)
        with self.lock:
            self._days[day] = [dict(r) for r in records]

    def route(self, request: Request) -> Response:
        if request.method == "GET" and request.path == "/v1/payments":
            return self._page(request)
        prefix = "/_stand-in/payments/"
        if request.method == "PUT" and request.path.startswith(prefix):
            records = request.json()
            if not isinstance(records, list):
                raise ValueError("the body must be a JSON list of payments")
            self.set_payments(request.path.removeprefix(prefix), records)
            return 200, {"ok": True, "payments": len(records)}
        return 404, {"error": f"no route {request.method} {request.path}"}

    def _page(self, request: Request) -> Response:
        day = request.query.get("date", "")
        try:
            date.fromisoformat(day)
        except ValueError:
            raise ValueError(f"date={day!r} is not YYYY-MM-DD") from None
        page = int(request.query.get("page", "1"))
        per_page = int(request.query.get("per_page", "100"))
        if page < 1 or not 1 <= per_page <= MAX_PER_PAGE:
            raise ValueError(f"need page >= 1 and 1 <= per_page <= {MAX_PER_PAGE}")
        with self.lock:
            records = self._days.get(day, [])
            chunk = records[(page - 1) * per_page : page * per_page]
            more = len(records) > page * per_page
        return 200, {"payments": chunk, "page": page, "next_page": page + 1 if more else None}


def start_payrail(
    payments: Mapping[str, Sequence[Mapping[str, Any]]] | None = None, port: int = 0, host: str = "127.0.0.1"
) -> PayrailStandIn:
    """Start Payrail's stand-in with ``{day: [payment, ...]}`` and return it."""
    return PayrailStandIn(payments, port, host).start()
