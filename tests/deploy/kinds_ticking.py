"""A schedule that ticks every second, for the scheduler's tick counters (kinds from kinds_metrics)."""

from __future__ import annotations

from tests.deploy import kinds_metrics  # noqa: F401 - registers the kind "ok"
from worker.schedules import schedule

schedule("every_second", "ok", every_s=1)
