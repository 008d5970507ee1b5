"""Logging set-up: readable sentences by default, one JSON object per line with
``LOG_FORMAT=json``. Job log calls pass the job's facts in ``extra`` (kind,
job_id, attempt, outcome, duration_ms, request_id, trace) so the JSON lines
carry them as fields and the text lines stay full sentences. Every line, its
traceback included, passes through :func:`worker.redact.redact`: a driver's
error that quotes a URL shows no password.

Fields come from whoever wrote the job (a kind, an id, an error message), so
the text lines escape control characters (``\\n``, ``\\x1b``...): an entry
cannot forge a log line nor drive the terminal. JSON lines escape them anyway.
A JSON line logged inside a span (an attempt's ``process`` span when the
worker traces) carries its ``trace_id`` and ``span_id``."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from worker.redact import redact
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


#: C0 and C1 control characters, DEL and the Unicode line breaks, as escapes (``\n``, ``\x1b``, ``\u2028``).
CONTROL_ESCAPES = {code: ascii(chr(code))[1:-1] for code in (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029)}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message and the job fields."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
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
            data["exception"] = self.formatException(record.exc_info)
        return redact(json.dumps(data, ensure_ascii=False, default=str))


class TextFormatter(logging.Formatter):
    """The readable line (time, level, logger, message), redacted, its control characters escaped (a
    traceback keeps its lines)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return super().formatMessage(record).translate(CONTROL_ESCAPES)

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
