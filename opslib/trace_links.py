"""From a dead letter to its trace: ``OPSLIB_TRACE_URL``, a template such as
``https://tempo.example/trace/{trace_id}``, turns a ``trace_id`` into a link in
``show()``, the panel and the runbook.

A trace id comes from the entry's ``traceparent`` (32 hex digits, checked by
:func:`worker.store.trace_context.trace_ids`); the link is built by
replacing ``{trace_id}`` only (the rest of the template is taken as written,
so a tracing UI's other braces survive), and every place that renders it as
HTML escapes it. Without the setting, or without a trace id, there is no link.
"""

from __future__ import annotations

import html
from urllib.parse import quote

from opslib.settings import TRACE_ID_PLACEHOLDER, OpslibSettings


def trace_url(trace_id: str) -> str:
    """The trace's URL from ``OPSLIB_TRACE_URL``, or "" when it is unset or there is no trace id."""
    template = OpslibSettings.from_env().trace_url
    if not template or not trace_id:
        return ""
    return template.replace(TRACE_ID_PLACEHOLDER, quote(trace_id, safe=""))


def trace_link_html(trace_id: str) -> str:
    """The trace id as an HTML link to its trace (escaped), or the id escaped alone without a URL."""
    url = trace_url(trace_id)
    if not url:
        return html.escape(trace_id)
    return f'<a href="{html.escape(url)}" target="_blank" rel="noopener noreferrer">{html.escape(trace_id)}</a>'
