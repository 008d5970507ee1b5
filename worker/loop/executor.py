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
   under the kind's timeout (:meth:`Executor.perform`);
5. the outcome (:mod:`worker.loop.outcomes`): a success is acknowledged with the
   next read; a failure is retried or dead-lettered as the kind's policy decides;
6. the slot frees itself when :meth:`Executor.run` returns (:mod:`worker.loop.slots`).

With an OpenTelemetry SDK, the whole of it runs inside the attempt's span
(:func:`worker.loop.tracing.traced` wraps :meth:`Executor.run`); the exception
is recorded on it here. Stopping a running job, cancelling one and running it
in a process of its own belong here too: this is where a job is run.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Iterable

from worker.errors import JobTimeout
from worker.kinds import Job, KindSpec, Registry
from worker.loop.gate import Gate
from worker.loop.handback import Fleet, HandBack
from worker.loop.outcomes import Outcomes
from worker.loop.partition_reader import PartitionReader
from worker.loop.slots import Raw
from worker.loop.tracing import record_failure
from worker.loop.unfinished import HandlerThreads
from worker.observability.observer import Observer, overrides
from worker.store import wire
from worker.store.vocabulary import REASON_UNKNOWN_KIND

log = logging.getLogger("worker")


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
        fleet: Fleet | None = None,
    ) -> None:
        self.kinds = registry.kinds
        """The kinds this worker runs, by name (the registry's own mapping)."""
        self.gate = gate
        observers = list(observers)
        self.hand_back = HandBack(fleet, observers)
        """Upcasts older payloads; hands back what this worker cannot run (``fleet``: what live workers run)."""
        # Bound once, for every job; only the observers that count starts (the tally does not).
        self._job_started = [observer.job_started for observer in overrides(observers, "job_started")]
        self._max_field_bytes, self._max_job_bytes = field_limits
        self.threads = HandlerThreads(threads, thread_name_prefix="job")
        """Where synchronous handlers run (their ``job`` threads), knowing whose (a stop's give-back asks)."""

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
                    job_started(job.kind, waited_s)
            started = time.perf_counter()
            try:
                if spec.is_async and spec.timeout_s is None:
                    await spec.handler(job)  # the common case, without perform's frame
                else:
                    await self.perform(spec, job)
            except (Exception, SystemExit) as exc:
                record_failure(exc)  # on the attempt's span, when the worker traces
                await outcomes.failed(spec, job, exc, time.perf_counter() - started)
                return
            part.succeeded(job, time.perf_counter() - started)
            if alone:
                await outcomes.flush_kept(entry_id)
        except asyncio.CancelledError:
            raise
        except Exception:
            # Only an error Redis will not get over (a refusal or a lost connection waits in the
            # episode) can get here; the entry stays pending and is reclaimed.
            log.exception("Could not record the outcome of entry %s; it stays pending.", entry_id)

    async def perform(self, spec: KindSpec, job: Job) -> None:
        """Call the handler: a coroutine on the loop, a function in a ``job`` thread (with the task's context,
        so the attempt's span goes with it, as ``asyncio.to_thread``); past the kind's ``timeout_s``, raise
        :class:`~worker.errors.JobTimeout` (a thread's handler is not stopped: it runs on, unawaited)."""
        if spec.is_async:
            call = spec.handler(job)
        else:
            run = contextvars.copy_context().run
            call = asyncio.get_running_loop().run_in_executor(self.threads, run, spec.handler, job)
        if spec.timeout_s is None:
            await call
            return
        try:
            await asyncio.wait_for(call, spec.timeout_s)
        except TimeoutError:
            raise JobTimeout(f"{spec.name} ran longer than its timeout of {spec.timeout_s} s") from None

    def shutdown(self) -> None:
        """The worker stopped: the threads of handlers still running are left to finish on their own."""
        self.threads.shutdown(wait=False, cancel_futures=True)
