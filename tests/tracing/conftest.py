"""The tracing tests need the OpenTelemetry SDK (the ``dev`` extra has it); without it they are not collected,
and the rest of the suite runs the queue without OpenTelemetry."""

from __future__ import annotations

import importlib.util


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


if not _installed("opentelemetry.sdk"):
    collect_ignore_glob = ["test_*.py"]
