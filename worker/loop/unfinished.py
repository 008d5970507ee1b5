"""What a stopping worker gives back of the jobs that did not finish within ``SHUTDOWN_GRACE_S``.

Scaling down must lose nothing and leave nothing waiting: a replica told to
stop lets its running jobs finish; at the end of the grace those still running
are told to stop (``job.stopping``, a cancel for async handlers:
:mod:`worker.loop.attempt`) and get ``STOP_GRACE_S`` to do so. Their entries
would stay pending for ``RECLAIM_IDLE_MS`` (a minute by default) as a dead
process's do. Instead:

- a job whose handler stopped is given back as
  :meth:`~worker.loop.partition_reader.PartitionReader.give_back` gives back
  what was read ahead (idle time set to ``RECLAIM_IDLE_MS``, delivery count
  left alone), so another worker's next reclaim takes it;
- a job whose handler still runs (a plain handler that ignores the event: its
  daemon thread dies with this process) is given back :data:`EXIT_MARGIN_S`
  short of idle, so that it is reclaimed only once this process has exited: no
  two attempts of a job ever run at once.

A job that finished is never given back: its entry was acknowledged or
settled, and XCLAIM leaves an entry that is no longer pending alone. One line
names each job given back.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from worker.job import Job
from worker.loop.executor import Executor
from worker.loop.partition_reader import PartitionReader

log = logging.getLogger("worker")

#: A job whose handler still runs at exit is reclaimable this long after its give-back (the process is gone).
EXIT_MARGIN_S = 3.0
#: Jobs named one by one in the line; the rest are counted.
NAMED = 10


async def give_back_unfinished(parts: Sequence[PartitionReader], executor: Executor, grace_s: float) -> int:
    """Give back the entries of the jobs told to stop at the end of the grace (those that stopped, and those
    whose handler runs on, a little later); how many were given back."""
    stopped = {(part.index, job.entry_id): job for part, job in executor.unfinished}
    running = {key: attempt.job for key, attempt in executor.running.items() if attempt.overdue}
    by_part = {part.index: part for part in parts}
    idle_ms = parts[0].outcomes.settings.reclaim_idle_ms if parts else 0
    for index in sorted({index for index, _entry_id in stopped}):
        await by_part[index].give_back([entry_id for i, entry_id in stopped if i == index])
    if stopped:
        log.warning(
            "Gave back %d jobs told to stop at the end of SHUTDOWN_GRACE_S=%g s, for another worker's next "
            "reclaim: %s.",
            len(stopped),
            grace_s,
            _named(stopped),
        )
    if running:
        later_ms = max(0, idle_ms - int(EXIT_MARGIN_S * 1000))
        for index in sorted({index for index, _entry_id in running}):
            await by_part[index].give_back([entry_id for i, entry_id in running if i == index], idle_ms=later_ms)
        log.warning(
            "%d jobs still ran after they were told to stop (their handler ignores job.stopping): given back, "
            "to be reclaimed %g s after this worker exits: %s.",
            len(running),
            EXIT_MARGIN_S,
            _named(running),
        )
    return len(stopped) + len(running)


def _named(jobs: dict[tuple[int, str], Job]) -> str:
    """``kind job_id (entry id)`` for each job, the first :data:`NAMED` of them."""
    names = [f"{job.kind} {job.job_id} ({entry_id})" for (_i, entry_id), job in jobs.items()]
    more = f" and {len(names) - NAMED} more" if len(names) > NAMED else ""
    return ", ".join(names[:NAMED]) + more
