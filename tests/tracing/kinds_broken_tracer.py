"""A worker whose SDK cannot start a span (its sampler raises), with the kinds of
:mod:`tests.tracing.kinds_traced`'s shape: the jobs must run all the same."""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import Sampler

from worker import Job, job_kind


class Broken(Sampler):
    """Raises on every span, as a misconfigured or buggy SDK might."""

    def should_sample(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the sampler is broken")

    def get_description(self) -> str:
        return "Broken"


trace.set_tracer_provider(TracerProvider(sampler=Broken()))


@job_kind("untraced_ok")
async def untraced_ok(job: Job) -> None:
    """Succeeds."""
