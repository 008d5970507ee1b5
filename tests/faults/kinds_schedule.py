"""The fault suite's kinds plus a schedule with a 1 s tick (for the clock-skew test only,
so that no other fault test's workers enqueue ticks), and ``started_at``, which records Redis's time
at its start (a delayed job must not start before its run time, whatever the worker's clock)."""

from tests.faults import kinds_faults
from worker import Job, job_kind, schedule

schedule("fault_every_second", "tick", every_s=1)


def starts_key(prefix: str) -> str:
    """Hash: job id -> Redis's time (epoch seconds) when its handler started."""
    return f"{prefix}faults:starts"


@job_kind("started_at")
async def started_at(job: Job) -> None:
    client = kinds_faults.state["redis"]
    seconds, micros = await client.time()
    await client.hset(starts_key(kinds_faults.state["prefix"]), job.job_id, f"{int(seconds) + int(micros) / 1e6:.3f}")
