"""One OpenTelemetry ``process`` span per attempt, when an SDK is configured; nothing otherwise.

:meth:`Tracing.detect` runs once when the worker is built: without
``opentelemetry`` imported (the ``otel`` extra absent, or nobody configured
it) or with the API's default provider (no SDK), it returns None and the
loop runs exactly as without tracing. Run the worker under
``opentelemetry-instrument python -m worker`` (or configure an SDK in a kinds
module) and each attempt runs inside a CONSUMER span ``process <queue>``
(messaging conventions: ``messaging.system``, ``messaging.destination.name``,
``messaging.message.id`` = the entry id; the kind, job id and attempt as
``job.*``):

- the first attempt of a job is a child of the context it carries
  (``traceparent``: the request, the scheduler tick);
- a later attempt starts a new trace linked to the previous attempt's span
  (``trace_link``, written by the retry move), so a job retried an hour later
  does not stretch the request's trace;
- a replayed job's first attempt starts a new trace linked to the replay's
  span (the ``traceparent`` the replay wrote).

The outcome marks the span (called by the executor and :mod:`worker.loop.outcomes`,
on the current span, so they cost a dictionary lookup without OpenTelemetry):
the exception is recorded, a retry or dead letter sets status ERROR, a dead
letter adds a ``dead_letter`` event with the reason, and the retry and bury
moves carry the span's context as ``trace_link``. A success sets status OK.
A malformed ``traceparent`` is ignored: the attempt starts a new trace.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from worker.loop.slots import RunEntry as SlotsRunEntry
from worker.retry import Retry
from worker.store.failures import bounded_traceback, describe_error
from worker.store.keys import GROUP
from worker.store.trace_context import (
    MESSAGING_SYSTEM,
    TRACE_LINK,
    TRACEPARENT,
    TRACER_NAME,
    TRACESTATE,
    active_span,
    span_context_of,
    traceparent_of,
)

RunEntry = Callable[..., Awaitable[None]]
SPAN_TRACEBACK_BYTES = 8192
"""An ``exception`` event's stack trace is cut to this many bytes, its end kept (``TRACEBACK_BYTES``'s default)."""
log = logging.getLogger("worker")


class Tracing:
    """The worker's tracer: wraps each attempt in its ``process`` span."""

    def __init__(self, destination: str) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.trace = trace
        self.tracer = trace.get_tracer(TRACER_NAME)
        self.propagator = TraceContextTextMapPropagator()
        self.empty = context.Context()
        self.name = f"process {destination}"
        self.destination = destination

    @classmethod
    def detect(cls, destination: str) -> Tracing | None:
        """A :class:`Tracing` when OpenTelemetry is loaded with an SDK's tracer provider, else None."""
        trace = sys.modules.get("opentelemetry.trace")
        if trace is None:
            return None
        if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider):
            return None
        return cls(destination)

    async def run_entry(self, run: RunEntry, part: Any, entry_id: str, raw: dict[bytes, bytes], alone: bool) -> None:
        """``run(part, entry_id, raw, alone=alone)`` inside the attempt's span (never raises, as ``run``).

        Should making the span fail, the entry runs without one: ``run`` frees
        the slot, so it must run whatever happens here.
        """
        try:
            span = self._span(entry_id, raw)
        except Exception:
            log.exception("Could not start the span of entry %s; it runs untraced.", entry_id)
            await run(part, entry_id, raw, alone=alone)
            return
        with self.trace.use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
            await run(part, entry_id, raw, alone=alone)
            status = getattr(span, "status", None)
            if status is not None and status.status_code is self.trace.StatusCode.UNSET:
                span.set_status(self.trace.StatusCode.OK)

    def _span(self, entry_id: str, raw: dict[bytes, bytes]) -> Any:
        """The attempt's span, started, for an entry's fields."""
        fields = {name: raw[name.encode()].decode("utf-8", "replace") for name in _READ if name.encode() in raw}
        attempts = fields.get("attempts", "0")
        attributes: dict[str, Any] = {
            "messaging.system": MESSAGING_SYSTEM,
            "messaging.operation.type": "process",
            "messaging.destination.name": self.destination,
            "messaging.consumer.group.name": GROUP,
            "messaging.message.id": entry_id,
            "job.kind": fields.get("kind", ""),
            "job.id": fields.get("job_id") or fields.get("outbox_id") or "",
            "job.attempt": int(attempts) + 1 if attempts.isdigit() and len(attempts) < 10 else 0,
        }
        parent, links = self._origin(fields, attempts == "0")
        return self.tracer.start_span(
            self.name,
            context=parent,
            kind=self.trace.SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
        )

    def _origin(self, fields: dict[str, str], first: bool) -> tuple[Any, list[Any]]:
        """The parent context and the links of an attempt (module docstring)."""
        if first and "replay_of" not in fields:
            carrier = {k: v for k, v in fields.items() if k in (TRACEPARENT, TRACESTATE)}
            return self.propagator.extract(carrier, context=self.empty), []
        linked = span_context_of(fields.get(TRACE_LINK)) or span_context_of(fields.get(TRACEPARENT))
        return self.empty, [self.trace.Link(linked)] if linked is not None else []


def traced(run_entry: SlotsRunEntry, destination: str) -> tuple[bool, SlotsRunEntry]:
    """(whether the worker traces, what its slots run): ``run_entry`` inside each attempt's span when an
    SDK is configured (:meth:`Tracing.detect`), else ``run_entry`` itself, at no cost a job."""
    tracing = Tracing.detect(destination)
    if tracing is None:
        return False, run_entry
    return True, functools.partial(tracing.run_entry, run_entry)


#: The fields the span is built from.
_READ = ("kind", "job_id", "outbox_id", "attempts", "replay_of", TRACEPARENT, TRACESTATE, TRACE_LINK)


def link_field() -> dict[str, str]:
    """``{"trace_link": <the current span's traceparent>}`` for the retry and bury moves, or {}."""
    span = active_span()
    return {} if span is None else {TRACE_LINK: traceparent_of(span.get_span_context())}


def record_failure(exc: BaseException) -> None:
    """Record the handler's exception on the attempt's span: the ``exception`` event that
    ``span.record_exception`` would add, its message and stack trace redacted and bounded as the dead
    entry's (``record_exception`` itself would send ``str(exc)`` whole)."""
    span = active_span()
    if span is not None:
        module, name = type(exc).__module__, type(exc).__qualname__
        span.add_event(
            "exception",
            {
                "exception.type": name if module in ("builtins", "") else f"{module}.{name}",
                "exception.message": describe_error(exc).partition(": ")[2],
                "exception.stacktrace": bounded_traceback(exc, SPAN_TRACEBACK_BYTES),
                "exception.escaped": "False",
            },
        )


def retrying(error: str, decision: Retry) -> dict[str, str]:
    """The attempt failed and the job will run again: status ERROR, and when; the retried job's
    ``trace_link`` field (:func:`link_field`)."""
    span = active_span()
    if span is not None:
        span.set_attributes({"job.outcome": "retried", "job.retry_in_s": round(decision.delay_s, 3)})
        _error(span, error)
    return link_field()


def mark_dead(reason: str, error: str, dead_id: str) -> None:
    """The attempt dead-lettered the job: a ``dead_letter`` event with the reason, status ERROR."""
    span = active_span()
    if span is not None:
        span.set_attribute("job.outcome", "dead")
        span.add_event("dead_letter", {"job.dead.reason": reason, "job.dead.id": dead_id, "exception.message": error})
        _error(span, error)


def _error(span: Any, error: str) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_status(Status(StatusCode.ERROR, error))
