"""One running attempt of a job, and how it is told to stop: its timeout, a cancel, the worker's shutdown.

An attempt ends only when its handler has stopped (docs/worker.md, "Stopping a
job"): whatever asks it to stop calls :meth:`Attempt.stop`, which sets
``job.stopping`` (the handler's own signal, a ``threading.Event``) and, for an
async handler, cancels its task (``CancelledError`` at its next ``await``). A
plain handler in a thread cannot be interrupted: it stops when it looks at the
event, and until then keeps its slot, so no other attempt of the job starts
and the worker never runs more handlers than it has slots. A handler in a
process of its own (``isolation="process"``) is killed once the event has been
set for ``STOP_GRACE_S`` (:mod:`worker.loop.isolation`).

The first reason wins; what the attempt became is decided when the handler
has returned or raised (:meth:`Attempt.ended`): a timeout is a failed attempt
(:class:`~worker.errors.JobTimeout`, retried as the kind's policy says), a
cancel is recorded as cancelled and never retried, a stop for shutdown leaves
the entry to be given back for another worker.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from worker.errors import JobCancelled, JobTimeout
from worker.job import Job

log = logging.getLogger("worker")

TIMEOUT = "timeout"
CANCEL = "cancel"
SHUTDOWN = "shutdown"


class Attempt:
    """A job's handler while it runs: why it was told to stop (``reason``, None while not), since when, and
    the means of telling it (the async handler's ``task``, a process's ``on_stop``)."""

    __slots__ = ("_timer", "cancel_note", "job", "on_stop", "reason", "started_at", "stopped_at", "task", "timeout_s")

    def __init__(self, job: Job, task: asyncio.Task[None] | None) -> None:
        self.job = job
        self.task = task
        """The task an async handler runs in (cancelled to stop it); None for a plain handler."""
        self.reason: str | None = None
        self.stopped_at = 0.0
        """When (monotonic) it was told to stop."""
        self.started_at: float | None = None
        """When (monotonic) a plain handler's thread or process started it; None until then."""
        self.on_stop: Callable[[], None] | None = None
        self.cancel_note = ""
        """Who cancelled it and why (``by: reason``), for the record."""
        self.timeout_s: float | None = None
        self._timer: asyncio.TimerHandle | None = None

    @property
    def overdue(self) -> bool:
        """Told to stop and still running: its slot is taken by a handler that should have stopped."""
        return self.reason is not None

    def stop(self, reason: str, note: str = "") -> bool:
        """Tell the handler to stop (``job.stopping``; a cancel for async; the kill timer of a process); False
        when it already was."""
        if self.reason is not None:
            return False
        self.reason, self.stopped_at, self.cancel_note = reason, time.monotonic(), note
        self.job.stopping.set()
        if self.task is not None:
            self.task.cancel()
        if self.on_stop is not None:
            self.on_stop()
        return True

    def time_out(self, timeout_s: float) -> None:
        """Stop it ``timeout_s`` after its handler started: now for an async handler; a plain handler's start
        is read from its thread (or process) when the time is up, so a wait for one never counts."""
        self.timeout_s = timeout_s
        self._timer = asyncio.get_running_loop().call_later(timeout_s, self._due)

    def handler_returned(self) -> None:
        """No timeout after this: the handler returned (or raised)."""
        if self._timer is not None:
            self._timer.cancel()

    def _due(self) -> None:
        timeout_s = self.timeout_s
        assert timeout_s is not None
        loop = asyncio.get_running_loop()
        if self.task is None and self.started_at is None:  # its thread has not started it yet
            self._timer = loop.call_later(0.01, self._due)
            return
        if self.started_at is not None and (left_s := self.started_at + timeout_s - time.monotonic()) > 0:
            self._timer = loop.call_later(left_s, self._due)
            return
        if self.stop(TIMEOUT) and self.task is None:
            job = self.job
            log.warning(
                "Job %s %s (entry %s) ran over its timeout of %g s: told to stop (job.stopping); its slot stays "
                "taken until its handler returns.",
                job.kind,
                job.job_id,
                job.entry_id,
                timeout_s,
            )

    def ended(self, error: BaseException | None) -> BaseException | None:
        """The handler returned (``error`` None) or raised ``error``: what the attempt became. A stopped async
        handler's cancel is taken back (its task goes on to record the outcome)."""
        reason = self.reason
        if reason is None:
            return error
        if self.task is not None and self.task.cancelling():
            self.task.uncancel()
        if reason == TIMEOUT:
            timed_out = JobTimeout(f"{self.job.kind} ran longer than its timeout of {self.timeout_s} s")
            timed_out.__cause__ = error if isinstance(error, Exception) else None
            return timed_out
        if reason == CANCEL:
            return JobCancelled(f"cancelled by {self.cancel_note}")
        return error  # shutdown: the executor gives the entry back whatever the handler did
