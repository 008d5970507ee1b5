"""The fault suite's kinds plus a schedule with a 1 s tick (for the clock-skew test only,
so that no other fault test's workers enqueue ticks)."""

from tests.faults import kinds_faults  # noqa: F401 - registers the kinds and the lifespan
from worker import schedule

schedule("fault_every_second", "tick", every_s=1)
