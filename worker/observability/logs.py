"""Logging set-up: readable sentences by default, one JSON object per line with
``LOG_FORMAT=json``. Job log calls pass the job's facts in ``extra`` (kind,
job_id, attempt, outcome, duration_ms, request_id, trace) so the JSON lines
carry them as fields and the text lines stay full sentences. Every line, its
traceback included, passes through :func:`worker.redact.redact`: a driver's
error that quotes a URL shows no password.

Fields come from whoever wrote the job (a kind, an id, an error message), so
the text lines escape control, bidi and zero-width characters
(:mod:`worker.printable`: ``\\n``, ``\\x1b``, ``\\u202e``...): an entry cannot
forge a log line, drive the terminal nor reorder what a reader sees. JSON
lines escape them too (C0 by ``json``, the rest as ``\\u`` escapes). A
message is cut to :data:`MESSAGE_BYTES` and a traceback to
:data:`TRACEBACK_BYTES` (its end kept), each with a marker saying how much was
cut (:func:`worker.redact.capture`), so no record is a 20 MB line.
A JSON line logged inside a span (an attempt's ``process`` span when the
worker traces) carries its ``trace_id`` and ``span_id``."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from worker.printable import json_printable, printable
from worker.redact import capture, redact
from worker.store.trace_context import active_span

JOB_FIELDS = (
    "kind",
    "job_id",
    "attempt",
    "outcome",
    "duration_ms",
    "reason",
    "request_id",
    "trace",
    "trace_id",
    "span_id",
)


MESSAGE_BYTES = 8192
"""A log record's message is cut to this many UTF-8 bytes (a job's error is within 4 KiB already)."""
TRACEBACK_BYTES = 16384
"""A log record's traceback is cut to this many UTF-8 bytes, its end kept."""


def message_of(record: logging.LogRecord) -> str:
    """The record's message, redacted and bounded."""
    return capture(record.getMessage(), MESSAGE_BYTES)


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message and the job fields."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": message_of(record),
        }
        span = active_span()
        if span is not None:
            context = span.get_span_context()
            data["trace_id"], data["span_id"] = f"{context.trace_id:032x}", f"{context.span_id:016x}"
        for name in JOB_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                data[name] = value
        if record.exc_info:
            data["exception"] = capture(self.formatException(record.exc_info), TRACEBACK_BYTES, keep_end=True)
        return json_printable(redact(json.dumps(data, ensure_ascii=False, default=str)))


class TextFormatter(logging.Formatter):
    """The readable line (time, level, logger, message), redacted and bounded, its control, bidi and
    zero-width characters escaped (a traceback keeps its lines)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = message_of(record)
        return printable(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return printable(capture(super().formatException(ei), TRACEBACK_BYTES, keep_end=True), lines=True)

    def formatStack(self, stack_info: str) -> str:
        return printable(capture(stack_info, TRACEBACK_BYTES, keep_end=True), lines=True)

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def configure(log_format: str = "text", level: str = "INFO") -> None:
    """Install one stderr handler on the root logger (replacing earlier ones)."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("httpx", "httpcore", "asyncio"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
