"""The SDK's in-memory exporter in a test's child process, dumped as JSON lines when the process exits.

``install(path)`` sets the global tracer provider (an SDK one, exporting each
span as it ends to an ``InMemorySpanExporter``) and writes every finished span
to ``path`` at exit, one JSON object a line with what the tests assert on:
name, kind, ids, parent, links, events, status and attributes. ``read(path)``
loads them back in the test.
"""

from __future__ import annotations

import atexit
import json
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def install(path: str) -> TracerProvider:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)

    def dump() -> None:
        with open(path, "a") as out:
            for span in exporter.get_finished_spans():
                out.write(json.dumps(as_dict(span)) + "\n")

    atexit.register(dump)
    return provider


def as_dict(span: ReadableSpan) -> dict[str, Any]:
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent": f"{span.parent.span_id:016x}" if span.parent else None,
        "links": [(f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}") for link in span.links],
        "events": [{"name": event.name, **dict(event.attributes or {})} for event in span.events],
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
    }


def read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
