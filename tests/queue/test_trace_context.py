"""Reading trace ids back from a job's ``traceparent`` (the archive's and opslib's ``trace_id`` and ``span_id``):
only a well-formed W3C traceparent gives them."""

from __future__ import annotations

import pytest

from worker.store.trace_context import trace_ids

TRACE, SPAN = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"


def test_a_well_formed_traceparent_gives_its_trace_and_span() -> None:
    assert trace_ids(f"00-{TRACE}-{SPAN}-01") == (TRACE, SPAN)
    assert trace_ids(f"00-{TRACE}-{SPAN}-03") == (TRACE, SPAN)


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "garbage",
        f"00-{TRACE.upper()}-{SPAN}-01",  # W3C hex is lower-case
        f"00-{'0' * 32}-{SPAN}-01",  # the all-zero trace id is invalid
        f"00-{TRACE}-{'0' * 16}-01",  # so is the all-zero span id
        f"00-{TRACE}-{SPAN}-01\n",
        f"00-{TRACE}-{SPAN}",
        f"00-{TRACE}<script>-{SPAN}-01",
    ],
)
def test_anything_else_gives_no_ids(value: str | None) -> None:
    assert trace_ids(value) == ("", "")
