"""Job kinds for the flow counter tests: one that succeeds, one that dies at once, one retried once then dead."""

from __future__ import annotations

from worker import Job, RetryPolicy, job_kind


class BarcodeRefused(ValueError):
    """The scanner refused the barcode: no retry would help."""


@job_kind("flow_ok")
async def flow_ok(job: Job) -> None:
    """Succeeds."""


@job_kind("flow_refused", retry=RetryPolicy(retries=3, base_s=0.01, cap_s=0.02, give_up_on=(BarcodeRefused,)))
async def flow_refused(job: Job) -> None:
    raise BarcodeRefused(f"barcode of {job.job_id} refused")


@job_kind("flow_flaky", retry=RetryPolicy(retries=1, base_s=0.01, cap_s=0.02))
async def flow_flaky(job: Job) -> None:
    raise ConnectionError("printer answered 503")
