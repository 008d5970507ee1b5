"""A traced worker (:mod:`tests.tracing.kinds_traced`) with a schedule every second, whose job appends
its ``job_id`` to the file named by ``TICK_LOG``."""

from __future__ import annotations

import os

import tests.tracing.kinds_traced  # noqa: F401 - the SDK and its span file
from worker import Job, job_kind, schedule


@job_kind("traced_tick")
def traced_tick(job: Job) -> None:
    with open(os.environ["TICK_LOG"], "a") as out:
        out.write(job.job_id + "\n")


schedule("traced_tick", "traced_tick", every_s=1)
