"""The text a failed job leaves on its dead entry: ``error``, ``traceback``, ``failed_at``.

What a handler raised is redacted and bounded here, when the failure is
recorded, before it is stored, logged, grouped or traced
(:func:`worker.redact.capture`): the error is cut to :data:`ERROR_BYTES` with
a marker and a digest of the whole message (the same digest as the
traceback's exception line), the traceback to
``TRACEBACK_BYTES`` (its end kept), and its exception lines carry the bounded
message, so a 20 MB message is read once (``str(exc)`` returns the message
without copying it; the digest encodes it a slice at a time) and never stored, logged or
sent whole.
"""

from __future__ import annotations

import traceback
from datetime import UTC, datetime

from worker.redact import capture

ERROR_BYTES = 4096
"""A dead entry's ``error`` (and each text derived from it: log lines, span events, the attempt log's,
which cuts further) is at most this many UTF-8 bytes."""


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def describe_error(exc: BaseException) -> str:
    """``Type: message``, the dead entry's ``error`` field: redacted, within :data:`ERROR_BYTES`."""
    message, name = str(exc), type(exc).__name__
    return f"{name}: {capture(message, ERROR_BYTES - len(name) - 2)}" if message else name  # no copy of the whole


def bounded_traceback(exc: BaseException, limit_bytes: int) -> str:
    """The traceback of ``exc``, redacted, keeping its end (where the error is) within the limit."""
    formatted = traceback.TracebackException.from_exception(exc)
    seen: set[int] = set()
    pending = [formatted]
    while pending:  # every exception of the chain (cause, context, a group's members) once
        each = pending.pop()
        if id(each) in seen:
            continue
        seen.add(id(each))
        message = getattr(each, "_str", None)  # the message line (CPython 3.11-3.13 keep it there)
        if isinstance(message, str):
            each._str = capture(message, ERROR_BYTES)  # type: ignore[attr-defined]
        pending += [e for e in (each.__cause__, each.__context__, *(each.exceptions or ())) if e is not None]
    return capture("".join(formatted.format()), limit_bytes, keep_end=True)
