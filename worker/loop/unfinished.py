"""What a stopping worker gives back of the jobs that did not finish within ``SHUTDOWN_GRACE_S``.

Scaling down must lose nothing and leave nothing waiting: a replica told to
stop lets its running jobs finish; those that do not are cancelled, and their
entries would stay pending for ``RECLAIM_IDLE_MS`` (a minute by default) as a
dead process's do. Instead, once a cancelled job's task has ended (its handler
stopped: no two attempts of a job ever run at once), its entry is given back
as :meth:`~worker.loop.partition_reader.PartitionReader.give_back` gives back
what was read ahead (idle time set to ``RECLAIM_IDLE_MS``, delivery count
left alone), so another worker's next reclaim takes it.

Not given back: a job whose task has not ended after its cancel (a handler
that ignores cancellation), and a job whose handler runs in a thread (a sync
handler), which a cancel does not stop until the stopping issue lands: the
worker's pool (:class:`HandlerThreads`) knows which entries' handlers are still
in it. Those entries stay pending for reclaim once idle, as before. A job that
finished is never given back: its entry was acknowledged or settled, and
XCLAIM leaves an entry that is no longer pending alone.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from worker.job import Job
from worker.loop.partition_reader import PartitionReader

log = logging.getLogger("worker")

T = TypeVar("T")
#: How long cancelled handlers get to unwind (a second was too short on a loaded machine: a handler
#: awaiting Redis had not ended, so its entry was not given back). Within the pods' termination grace.
UNWIND_S = 5.0
Slot = tuple[int, str]
"""A running entry: its partition's index and its id (the key of ``Slots.inflight``)."""


async def cancel(
    inflight: Mapping[Slot, asyncio.Task[None]], left: Collection[asyncio.Task[None]], *, give_back: bool
) -> dict[Slot, asyncio.Task[None]]:
    """Cancel the jobs ``left`` running at the end of the grace and wait up to :data:`UNWIND_S` for them to
    end; return those to give back (read before the cancel: a task frees its slot as it ends). With
    ``give_back`` False (outcomes the worker decided wait for Redis: their jobs must not run again), none."""
    cancelled = {slot: task for slot, task in inflight.items() if task in left} if give_back else {}
    for task in left:
        task.cancel()
    if left:
        await asyncio.wait(left, timeout=UNWIND_S)
    return cancelled


class HandlerThreads(ThreadPoolExecutor):
    """The worker's pool for sync handlers, which knows the entries whose handler is in it (queued or running)."""

    def __init__(self, max_workers: int, thread_name_prefix: str = "") -> None:
        super().__init__(max_workers, thread_name_prefix=thread_name_prefix)
        self.entries: set[str] = set()
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        entry_id = next((arg.entry_id for arg in args if isinstance(arg, Job)), None)
        future = super().submit(fn, *args, **kwargs)
        if entry_id is not None:
            with self._lock:
                self.entries.add(entry_id)
            future.add_done_callback(lambda _f: self._forget(entry_id))
        return future

    def _forget(self, entry_id: str) -> None:
        with self._lock:
            self.entries.discard(entry_id)


async def give_back_unfinished(
    parts: Sequence[PartitionReader], cancelled: Mapping[Slot, asyncio.Task[None]], threads: HandlerThreads
) -> int:
    """Give back the entries of the ``cancelled`` jobs whose handler stopped; how many were given back."""
    ended = [(i, e) for (i, e), task in cancelled.items() if task.done() and e not in threads.entries]
    by_part = {part.index: part for part in parts}
    for index in sorted({index for index, _entry_id in ended}):
        await by_part[index].give_back([entry_id for i, entry_id in ended if i == index])
    if ended:
        log.warning("Gave back %d cancelled jobs for another worker to run at its next reclaim.", len(ended))
    if len(cancelled) > len(ended):
        log.warning(
            "%d cancelled jobs are still running (thread handlers, or ignoring the cancel): their entries stay "
            "pending, for reclaim once idle.",
            len(cancelled) - len(ended),
        )
    return len(ended)
