"""W3C trace context on the wire: the fields, writing them at enqueue, reading trace ids back.

A job may carry three trace fields (docs/worker.md, "Wire format"):

=================  ===========================================  ==============================
field              holds                                        written by
=================  ===========================================  ==============================
``traceparent``    W3C traceparent of the span that created     enqueue, enqueue_many (the
                   the job (a request, a scheduler tick, a      outbox relay: the request's
                   replay)                                      context kept with the row),
                                                                the scheduler, replay
``tracestate``     W3C tracestate of that span, when it has     the same
                   one
``trace_link``     traceparent of the job's last attempt's      the retry move, the bury move
                   ``process`` span: the next attempt (or the   (a replay inside a span drops
                   replay of the dead letter) links to it       it: its span links to it)
=================  ===========================================  ==============================

Nothing here imports OpenTelemetry that is not loaded already. A process
that never imported ``opentelemetry.trace`` cannot have an active span, so
:func:`sending` looks in ``sys.modules`` and, finding nothing, costs a
dictionary lookup: the queue runs without the ``otel`` extra. (redis-py
imports the API whenever it is installed; then it is one
``get_current_span`` call, and without an SDK no span is ever current.) With a span active it opens a
``send`` span (PRODUCER, messaging conventions) under it when the tracer
records, and writes that span's context into each job.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
TRACE_LINK = "trace_link"
#: Every trace field a job may carry.
TRACE_FIELDS = (TRACEPARENT, TRACESTATE, TRACE_LINK)
#: ``messaging.system`` on every span the queue makes: the transport, as ``kafka`` or ``rabbitmq`` would be.
MESSAGING_SYSTEM = "redis_streams"
#: The instrumentation scope's name (``get_tracer``): the package.
TRACER_NAME = "worker"

_TRACEPARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16


def trace_ids(traceparent: str | None) -> tuple[str, str]:
    """(trace id, span id), lower-case hex, of a well-formed traceparent; ("", "") for anything else."""
    found = _TRACEPARENT.fullmatch(traceparent or "")
    if found is None or found[1] == _ZERO_TRACE or found[2] == _ZERO_SPAN:
        return "", ""
    return found[1], found[2]


def traceparent_of(span_context: Any) -> str:
    """The W3C traceparent of an OpenTelemetry ``SpanContext``."""
    return f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-{int(span_context.trace_flags):02x}"


def active_span() -> Any:
    """The current span when OpenTelemetry is loaded and a valid span is current, else None."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    span = trace.get_current_span()
    return span if span.get_span_context().is_valid else None


def context_fields(span: Any) -> dict[str, str]:
    """The wire fields of ``span``'s context: ``traceparent``, and ``tracestate`` when it has one."""
    context = span.get_span_context()
    out = {TRACEPARENT: traceparent_of(context)}
    if context.trace_state:
        out[TRACESTATE] = context.trace_state.to_header()
    return out


def span_context_of(traceparent: str | None) -> Any:
    """The ``SpanContext`` a traceparent names, or None when it is missing or malformed.

    Only for callers that know OpenTelemetry is loaded (a span is active, or the worker traces).
    """
    if not traceparent:
        return None
    from opentelemetry import context, trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier = {TRACEPARENT: traceparent}
    found = trace.get_current_span(TraceContextTextMapPropagator().extract(carrier, context=context.Context()))
    span_context = found.get_span_context()
    return span_context if span_context.is_valid else None


def current_fields() -> dict[str, str]:
    """The active span's context as wire fields ({} when none is active), for a job to be sent later
    (an outbox row's, which the relay publishes)."""
    span = active_span()
    return {} if span is None else context_fields(span)


def add_links(traceparents: Iterable[str]) -> None:
    """Link the active span to the spans ``traceparents`` name (entries found after it started: a
    replay's from the archive); malformed or empty ones are skipped."""
    span = active_span()
    if span is None:
        return
    for found in map(span_context_of, traceparents):
        if found is not None:
            span.add_link(found)


@contextmanager
def sending(
    destination: str, count: int, operation: str = "send", links: Iterable[str] = (), root: bool = False
) -> Iterator[dict[str, str]]:
    """Around writing ``count`` jobs to ``destination``: yields the trace fields to give each job.

    {} (and nothing else done) when no span is active. Else a PRODUCER span
    ``<operation> <destination>`` under the active one, linked to the spans
    ``links`` name (traceparents; a replay's: the dead letters' last
    attempts), whose context the jobs carry; a non-recording tracer (API
    without SDK) passes the active span's context on unchanged. ``root``
    (the scheduler's tick): with no span active, start a trace when
    OpenTelemetry is loaded and its tracer records.
    """
    parent = active_span()
    if parent is None and not (root and "opentelemetry.trace" in sys.modules):
        yield {}
        return
    from opentelemetry import trace

    attributes: dict[str, Any] = {
        "messaging.system": MESSAGING_SYSTEM,
        "messaging.destination.name": destination,
        "messaging.operation.type": "send",
        "messaging.operation.name": operation,
    }
    if count != 1:
        attributes["messaging.batch.message_count"] = count
    linked = [trace.Link(found) for found in map(span_context_of, links) if found is not None]
    tracer = trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(
        f"{operation} {destination}", kind=trace.SpanKind.PRODUCER, attributes=attributes, links=linked
    ) as span:
        source = span if span.get_span_context().is_valid else parent
        yield {} if source is None else context_fields(source)
