"""The text a failed job leaves on its dead entry: ``error``, ``traceback``, ``failed_at``."""

from __future__ import annotations

import traceback
from datetime import UTC, datetime


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def describe_error(exc: BaseException) -> str:
    """``Type: message``, the dead entry's ``error`` field."""
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def bounded_traceback(exc: BaseException, limit_bytes: int) -> str:
    """The traceback of ``exc``, keeping its end (where the error is) within the limit."""
    text = "".join(traceback.format_exception(exc))
    data = text.encode()
    if len(data) <= limit_bytes:
        return text
    return "...(cut)...\n" + data[-(limit_bytes - 16) :].decode("utf-8", "ignore")
