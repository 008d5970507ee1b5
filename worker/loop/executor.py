"""Running one entry, top to bottom: parse, gate, started, perform (timeout, thread), outcome, free the slot.

The read loop hands an entry to a slot (:mod:`worker.loop.slots`), and the
slot hands it here: :meth:`Executor.run` is the one place that calls a
handler. In the order the code reads:

1. parse the entry (:func:`worker.store.wire.parse_entry`); what is not a job
   it can run is dead-lettered at once, never run; an older payload version is
   upcast, and a newer one (or a kind another live worker runs) is handed back
   for a worker that can run it (:mod:`worker.loop.handback`);
2. the gate (:mod:`worker.loop.gate`): a job of a paused kind is parked, one of
   a throttled kind takes a token or is deferred;
3. the observers hear it started, with its wait (:mod:`worker.loop.observe`);
4. perform: the handler, on the loop (async) or in the worker's threads (sync),
   under the kind's timeout counted from the handler's start (:meth:`Executor.perform`); an
   attempt told to stop (its timeout, a cancel, the shutdown: :mod:`worker.loop.attempt`) ends
   when its handler has returned, never before;
5. the outcome (:mod:`worker.loop.outcomes`): a success is acknowledged with the
   next read; a failure is retried or dead-lettered as the kind's policy decides;
6. the slot frees itself when :meth:`Executor.run` returns (:mod:`worker.loop.slots`).

With an OpenTelemetry SDK, the whole of it runs inside the attempt's span
(:func:`worker.loop.tracing.traced` wraps :meth:`Executor.run`); the exception
is recorded on it here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from worker.job import Job
from worker.kinds import KindSpec, Registry
from worker.loop.attempt import CANCEL, SHUTDOWN, Attempt
from worker.loop.gate import Gate
from worker.loop.handback import Fleet, HandBack
from worker.loop.handler_threads import HandlerThreads
from worker.loop.isolation import in_child
from worker.loop.outcomes import Outcomes
from worker.loop.partition_reader import PartitionReader
from worker.loop.slots import Raw
from worker.loop.tracing import record_failure
from worker.observability.observer import Observer, overrides
from worker.store import wire
from worker.store.vocabulary import REASON_UNKNOWN_KIND

log = logging.getLogger("worker")

#: The cancelled ids an executor remembers, for entries it has read and not started yet.
REMEMBERED = 10_000


class Executor:
    """Runs one entry of a partition through its handler and records the outcome (:meth:`run`): an entry
    in, its outcome recorded (or kept until Redis takes it), nothing raised.

    ``observers`` hear each job start (those that override
    ``job_started``); ``field_limits``: ``MAX_FIELD_BYTES`` and
    ``MAX_JOB_BYTES``; ``fleet``: the kinds and versions live workers run
    (:mod:`worker.loop.handback`; None: none but this one).
    """

    def __init__(
        self,
        registry: Registry,
        gate: Gate,
        observers: Iterable[Observer],
        *,
        threads: int,
        field_limits: tuple[int, int],
        stop_grace_s: float = 2.0,
        fleet: Fleet | None = None,
    ) -> None:
        self.kinds = registry.kinds
        """The kinds this worker runs, by name (the registry's own mapping)."""
        self.gate = gate
        self.stop_grace_s = stop_grace_s
        """``STOP_GRACE_S``: a child process told to stop is killed this long after."""
        observers = list(observers)
        self.hand_back = HandBack(fleet, observers)
        """Upcasts older payloads; hands back what this worker cannot run (``fleet``: what live workers run)."""
        # Bound once, for every job; only the observers that count starts (the tally does not).
        self._job_started = [observer.job_started for observer in overrides(observers, "job_started")]
        self._max_field_bytes, self._max_job_bytes = field_limits
        self.threads = HandlerThreads(threads)
        """Where synchronous handlers run (their ``job`` threads)."""
        self.running: dict[tuple[int, str], Attempt] = {}
        """The attempts whose handler runs, by (partition index, entry id)."""
        self.unfinished: list[tuple[PartitionReader, Job]] = []
        """Entries whose handler a shutdown stopped: neither acknowledged nor retried, to be given back."""
        self.cancelled: dict[str, str] = {}
        """Job ids and entry ids cancelled (by the cancel channel or a mark), with ``by: reason``."""

    async def run(self, part: PartitionReader, entry_id: str, raw: Raw, alone: bool = False) -> None:
        """Run one entry of ``part`` through its handler and record the outcome. Never raises.

        ``alone``: the entry was delivered before (reclaimed from a dead process)
        and runs with nothing beside it; its acknowledgement is sent at once.
        """
        outcomes: Outcomes = part.outcomes
        try:
            job = wire.parse_entry(entry_id, raw, self.kinds, self._max_field_bytes, self._max_job_bytes)
            if isinstance(job, wire.Malformed):
                if job.reason != REASON_UNKNOWN_KIND or not await self.hand_back.lacking(part, job, raw):
                    await outcomes.malformed(job)
                return
            spec = self.kinds[job.kind]
            if self.cancelled and (note := self.cancelled.get(job.job_id, self.cancelled.get(entry_id))) is not None:
                await self._cancelled(part, job, note, alone)  # cancelled after its read: it never starts
                return
            if spec.version > 1 or b"v" in raw:  # a versioned payload: upcast, or hand it back
                fitted = await self.hand_back.fit(part, spec, job, raw)
                if fitted is None:
                    return
                job = fitted
            if job.kind in self.gate.held and not await self.gate.admit(part, job):
                return
            if self._job_started:
                waited_s = time.time() - wire.entry_epoch_s(entry_id)
                for job_started in self._job_started:
                    job_started(job.kind, waited_s, part.keys.queue)
            key = (part.index, entry_id)
            attempt = self.running[key] = Attempt(job, asyncio.current_task() if spec.is_async else None)
            started = time.perf_counter()
            try:
                if spec.is_async and spec.timeout_s is None:
                    await spec.handler(job)  # the common case, without perform's frame
                else:
                    await self.perform(spec, attempt)
            except asyncio.CancelledError:
                if attempt.task is None or attempt.reason is None or attempt.task.cancelling() > 1:
                    raise  # not (only) a stop of ours: the worker's own task is being cancelled
                error = attempt.ended(None)
            except (Exception, SystemExit) as exc:
                error = exc if attempt.reason is None else attempt.ended(exc)
            else:
                error = None if attempt.reason is None else attempt.ended(None)
            finally:
                del self.running[key]
            if error is None and attempt.reason is None:
                part.succeeded(job, time.perf_counter() - started)
                if alone or outcomes.releases:  # a unique key is released now, not with the next read
                    await outcomes.flush_kept(entry_id)
            else:
                await self._ended(part, spec, attempt, error, time.perf_counter() - started, alone)
        except asyncio.CancelledError:
            raise
        except Exception:
            # Only an error Redis will not get over (a refusal or a lost connection waits in the
            # episode) can get here; the entry stays pending and is reclaimed.
            log.exception("Could not record the outcome of entry %s; it stays pending.", entry_id)

    async def perform(self, spec: KindSpec, attempt: Attempt) -> None:
        """Call the handler: a coroutine on the loop, a function in a ``job`` thread
        (:mod:`worker.loop.handler_threads`); past the kind's ``timeout_s`` from the handler's start, the attempt
        is told to stop (:mod:`worker.loop.attempt`), and this returns once the handler has."""
        job = attempt.job
        if spec.timeout_s is not None:
            attempt.time_out(spec.timeout_s)
        try:
            if spec.is_async:
                await spec.handler(job)
            elif spec.isolation == "process":
                run = in_child(spec.handler, self.stop_grace_s)
                await self.threads.submit(lambda job: run(job, attempt), job, attempt)
            else:
                await self.threads.submit(spec.handler, job, attempt)
        finally:
            attempt.handler_returned()

    def cancel(self, ids: Iterable[str], note: str) -> None:
        """Cancel the jobs of these job ids or entry ids (``note``: ``by: reason``): a running attempt is told
        to stop; one read and not started never starts (the ids are remembered, the last
        :data:`REMEMBERED` of them)."""
        wanted = set(ids)
        for attempt in list(self.running.values()):
            job = attempt.job
            if job.job_id in wanted or job.entry_id in wanted:
                attempt.stop(CANCEL, note)
        for cancelled_id in wanted:
            self.cancelled[cancelled_id] = note
        while len(self.cancelled) > REMEMBERED:
            del self.cancelled[next(iter(self.cancelled))]

    async def _ended(
        self,
        part: PartitionReader,
        spec: KindSpec,
        attempt: Attempt,
        error: BaseException | None,
        took_s: float,
        alone: bool,
    ) -> None:
        """An attempt that failed or was told to stop: given back (shutdown), cancelled, or failed."""
        job = attempt.job
        if attempt.reason == SHUTDOWN:
            self.unfinished.append((part, job))  # the drain gives it back
        elif attempt.reason == CANCEL:
            await self._cancelled(part, job, attempt.cancel_note, alone)
        elif error is not None:
            record_failure(error)  # on the attempt's span, when the worker traces
            await part.outcomes.failed(spec, job, error, took_s)

    async def _cancelled(self, part: PartitionReader, job: Job, note: str, alone: bool) -> None:
        """A cancelled job's outcome: acknowledged (never retried nor dead-lettered), said in one line."""
        part.outcomes.releases.acknowledge(job, part.outcomes.acks)
        log.warning(
            "Job %s %s (entry %s) was cancelled by %s; acknowledged, never retried.",
            job.kind,
            job.job_id,
            job.entry_id,
            note,
        )
        if alone or part.outcomes.releases:
            await part.outcomes.flush_kept(job.entry_id)

    def stop_all(self, reason: str) -> list[Attempt]:
        """Tell every running handler to stop (``job.stopping``; a cancel for async); the attempts told."""
        return [attempt for attempt in list(self.running.values()) if attempt.stop(reason)]

    def overdue(self) -> int:
        """Handlers told to stop that still run (each keeps its slot)."""
        return sum(1 for attempt in self.running.values() if attempt.overdue)

    def shutdown(self) -> None:
        """The worker stopped: idle threads end; a handler still running is left to its daemon thread."""
        self.threads.shutdown()
