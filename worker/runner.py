"""The consumer loop and the wrapper around each handler.

The loop reads like a checklist: stopping? how many free slots? read at most
that many entries (the pending acknowledgements ride in the same round trip),
hand each entry to a slot. Everything else is a timed chore beside it.

The wrapper (:meth:`Worker.run_entry`) never raises. It returns after the
handler succeeded (the entry is acknowledged in the next batch), or it has put
the job in ``delayed`` with attempts + 1 (retry script: ZADD + XACK), or it has
dead-lettered it (bury script: XADD dead + XACK). An entry delivered before
(reclaimed from a dead process) runs alone and is acknowledged at once, so an
innocent neighbour of a crasher never drifts toward the poison limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions

from worker import wire
from worker.chores import CONNECTION_ERRORS, Chore, run_chore, sleep_or_stop
from worker.dead_log import outcome_record
from worker.errors import JobTimeout
from worker.failures import bounded_traceback, describe_error, now_iso
from worker.keys import GROUP, REPLAY_OUTCOME_TTL_S, Keys
from worker.kinds import Job, KindSpec, Registry
from worker.observe import Observer, Tally, entry_epoch_s
from worker.resp import pairs, resp_command
from worker.retry import DeadLetter, decide
from worker.scripts import Scripts
from worker.settings import Settings

log = logging.getLogger("worker")

HEARTBEAT_INTERVAL_S = 5.0
HEARTBEAT_TTL_S = 15
SUMMARY_INTERVAL_S = 60.0


class Worker:
    """One consumer in group ``workers``: the loop, the wrapper and the chores."""

    def __init__(
        self,
        redis_client: aioredis.Redis,
        settings: Settings,
        registry: Registry,
        *,
        burst: bool = False,
        chores: Iterable[Chore] = (),
        observers: Iterable[Observer] = (),
        more_work: Iterable[Callable[[], Awaitable[bool]]] = (),
    ) -> None:
        self.redis = redis_client
        self.settings = settings
        self.registry = registry
        self.burst = burst
        self.name = settings.worker_name
        self.keys = Keys(settings.prefix)
        self.scripts = Scripts(redis_client, self.keys)
        self.tally = Tally()
        self.observers: list[Observer] = [self.tally, *observers]
        self.extra_chores = list(chores)
        self.more_work = list(more_work)
        self.stopping = asyncio.Event()
        self.inflight: dict[str, asyncio.Task[None]] = {}
        self.started_at: dict[str, float] = {}
        self._acks: list[str] = []
        self._replay_outcomes: list[tuple[str, str, str]] = []
        self._slot_freed = asyncio.Event()
        self._reading = asyncio.Lock()
        self._threads = ThreadPoolExecutor(settings.concurrency, thread_name_prefix="job")
        self._rng = random.Random()
        self._side_tasks: set[asyncio.Task[None]] = set()
        self._read_conn: Any = None
        self._read_commands: dict[int, bytes] = {}
        self._xack_head = ("XACK", self.keys.jobs, GROUP)

    # ------------------------------------------------------------------ loop

    async def run(self) -> None:
        """Consume until stopped (or, in burst mode, until the queue is drained)."""
        await self.ensure_group()
        log.info(
            "Worker %s started: %d slots, kinds %s.",
            self.name,
            self.settings.concurrency,
            ", ".join(sorted(self.registry.kinds)) or "none",
        )
        chores = [asyncio.create_task(run_chore(c, self.stopping)) for c in self.chores()]
        try:
            await self._consume()
        finally:
            self.stopping.set()
            await self._drain()
            for task in chores:
                task.cancel()
            await asyncio.gather(*chores, return_exceptions=True)
            await self._goodbye()
            self._threads.shutdown(wait=False, cancel_futures=True)
            self._log_summary()

    def stop(self) -> None:
        """Stop reading; running jobs get ``SHUTDOWN_GRACE_S`` to finish."""
        if not self.stopping.is_set():
            log.info("Worker %s is stopping: no new reads, running jobs may finish.", self.name)
        self.stopping.set()
        self._slot_freed.set()

    async def ensure_group(self) -> None:
        """Create group ``workers`` on ``jobs`` (and the stream) unless it exists."""
        try:
            await self.redis.xgroup_create(self.keys.jobs, GROUP, id="0", mkstream=True)
        except redis.exceptions.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def _consume(self) -> None:
        failures = 0
        while not self.stopping.is_set():
            free = self.settings.concurrency - len(self.inflight)
            if free <= 0:
                self._slot_freed.clear()
                await self._slot_freed.wait()
                # Let the other jobs that are ready finish too, so the next read fills
                # many slots in one round trip instead of one slot per round trip.
                await asyncio.sleep(0)
                await asyncio.sleep(0)
                continue
            try:
                async with self._reading:
                    if self.stopping.is_set():
                        break
                    entries = await self._read(free)
                    for entry_id, raw in entries:
                        self._start(entry_id, raw)
            except CONNECTION_ERRORS as exc:
                failures += 1
                if failures == 1:
                    log.warning("Lost the connection to Redis (%s); reconnecting with backoff.", exc)
                await sleep_or_stop(min(5.0, 0.05 * 2**failures) * self._rng.uniform(0.5, 1.0), self.stopping)
                continue
            except redis.exceptions.ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                log.warning("The consumer group is gone (Redis lost its data?); creating it again.")
                await self.ensure_group()
                continue
            if failures:
                log.info("Reconnected to Redis.")
                failures = 0
            if not entries and self.burst and await self._drained():
                log.info("Burst mode: the queue is drained; exiting.")
                return

    async def _read(self, count: int) -> list[tuple[str, dict[bytes, bytes]]]:
        """Acknowledge finished entries and read up to ``count`` new ones, in one round trip.

        The read loop owns one connection and writes XACK and XREADGROUP to it
        together (a pipeline without redis-py's per-call pipeline object, which
        costs more than the round trip at this rate). Replay outcomes, rare,
        are flushed separately first.
        """
        if self._replay_outcomes:
            await self.flush_acks()
        acks = self._acks
        self._acks = []
        conn = self._read_conn
        if conn is None:
            conn = self._read_conn = await self.redis.connection_pool.get_connection()
        try:
            read = self._read_command(count)
            if acks:
                await conn.send_packed_command(resp_command(self._xack_head, *acks) + read, check_health=False)
                await conn.read_response()
            else:
                await conn.send_packed_command(read, check_health=False)
            reply = await conn.read_response()
        except BaseException:
            self._acks[:0] = acks
            await conn.disconnect()
            raise
        if not reply:
            return []
        entries = next(iter(reply.values())) if isinstance(reply, dict) else reply[0][1]
        return [(eid.decode(), pairs(flat)) for eid, flat in entries]

    def _read_command(self, count: int) -> bytes:
        """The packed XREADGROUP for ``count`` entries (cached: it is sent thousands of times a second)."""
        packed = self._read_commands.get(count)
        if packed is None:
            block_ms = min(self.settings.block_ms, 50) if self.burst else self.settings.block_ms
            packed = resp_command(
                ("XREADGROUP", "GROUP", GROUP, self.name, "COUNT", str(count), "BLOCK", str(block_ms)),
                "STREAMS",
                self.keys.jobs,
                ">",
            )
            self._read_commands[count] = packed
        return packed

    def _queue_acks(self, pipe: Any, acks: list[str], outcomes: list[tuple[str, str, str]]) -> None:
        if acks:
            pipe.xack(self.keys.jobs, GROUP, *acks)
        for batch, field, value in outcomes:
            pipe.hset(self.keys.replay(batch), field, value)
            pipe.expire(self.keys.replay(batch), REPLAY_OUTCOME_TTL_S)
            if self.settings.archive_on:
                pipe.xadd(self.keys.dead_log, outcome_record(field, batch, dead_again=None, at=now_iso()))

    async def flush_acks(self) -> None:
        """Send the acknowledgements (and replay outcomes) gathered so far."""
        acks, outcomes = self._acks, self._replay_outcomes
        if not acks and not outcomes:
            return
        self._acks, self._replay_outcomes = [], []
        pipe = self.redis.pipeline(transaction=False)
        self._queue_acks(pipe, acks, outcomes)
        try:
            await pipe.execute()
        except BaseException:
            self._acks[:0], self._replay_outcomes[:0] = acks, outcomes
            raise

    def _start(self, entry_id: str, raw: dict[bytes, bytes], alone: bool = False) -> None:
        self.inflight[entry_id] = asyncio.create_task(self.run_entry(entry_id, raw, alone=alone))
        self.started_at[entry_id] = time.monotonic()

    async def _drained(self) -> bool:
        """Burst mode's exit test: nothing in flight, pending, undelivered or delayed,
        and no ``more_work`` check (a lifespan's, e.g. unpublished outbox rows) says otherwise.

        The checks run before Redis is read: work they see end up in ``jobs`` or
        ``delayed`` before they turn false, and the undelivered test catches an
        entry a chore (relay, promote) added since the last read.
        """
        if self.inflight:
            return False
        for check in self.more_work:
            if await check():
                return False
        await self.flush_acks()
        pipe = self.redis.pipeline(transaction=False)
        pipe.xpending(self.keys.jobs, GROUP)
        pipe.zcard(self.keys.delayed)
        pipe.xinfo_stream(self.keys.jobs)
        pipe.xinfo_groups(self.keys.jobs)
        pending, delayed, stream, groups = await pipe.execute()
        delivered = next((g["last-delivered-id"] for g in groups if g["name"] in (GROUP, GROUP.encode())), None)
        undelivered = stream["length"] > 0 and delivered != stream["last-generated-id"]
        return int(pending["pending"]) == 0 and int(delayed) == 0 and not undelivered

    async def _drain(self) -> None:
        """On stop: let running jobs finish within the grace period, then flush acks."""
        if self.inflight:
            log.info(
                "Waiting up to %.0f s for %d running jobs.",
                self.settings.shutdown_grace_s,
                len(self.inflight),
            )
            _done, left = await asyncio.wait(list(self.inflight.values()), timeout=self.settings.shutdown_grace_s)
            if left:
                log.warning(
                    "%d jobs did not finish within SHUTDOWN_GRACE_S; they stay pending for reclaim.",
                    len(left),
                )
                for task in left:
                    task.cancel()
                await asyncio.wait(left, timeout=1.0)
        for attempt in range(5):
            try:
                await self.flush_acks()
                return
            except CONNECTION_ERRORS:
                await asyncio.sleep(0.2 * 2**attempt)
        log.warning(
            "Could not acknowledge %d finished jobs; they will be reclaimed and run again.",
            len(self._acks),
        )

    async def _goodbye(self) -> None:
        if self._read_conn is not None:
            await self.redis.connection_pool.release(self._read_conn)
            self._read_conn = None
        with contextlib.suppress(*CONNECTION_ERRORS):
            await self.redis.delete(self.keys.heartbeat(self.name))

    # --------------------------------------------------------------- wrapper

    async def run_entry(self, entry_id: str, raw: dict[bytes, bytes], *, alone: bool = False) -> None:
        """Run one entry through its handler and record the outcome. Never raises."""
        try:
            parsed = wire.parse_entry(entry_id, raw, self.registry, self.settings.max_field_bytes)
            if isinstance(parsed, wire.Malformed):
                await self._bury_malformed(parsed)
                return
            spec = self.registry.kinds[parsed.kind]
            waited_s = time.time() - entry_epoch_s(entry_id)
            for observer in self.observers:
                observer.job_started(parsed.kind, waited_s)
            started = time.perf_counter()
            try:
                if spec.is_async and spec.timeout_s is None:
                    await spec.handler(parsed)  # the common case, without _call's frame
                else:
                    await self._call(spec, parsed)
            except (Exception, SystemExit) as exc:
                await self._failed(spec, parsed, exc, time.perf_counter() - started)
                return
            self._succeeded(parsed, time.perf_counter() - started)
            if alone:
                await self.flush_acks()
        except asyncio.CancelledError:
            raise
        except Exception:
            # Only Redis being away can get here; the entry stays pending and is reclaimed.
            log.exception("Could not record the outcome of entry %s; it stays pending.", entry_id)
        finally:
            self.inflight.pop(entry_id, None)
            self.started_at.pop(entry_id, None)
            self._slot_freed.set()

    async def _call(self, spec: KindSpec, job: Job) -> None:
        if spec.is_async:
            call = spec.handler(job)
        else:
            call = asyncio.get_running_loop().run_in_executor(self._threads, spec.handler, job)
        if spec.timeout_s is None:
            await call
            return
        try:
            await asyncio.wait_for(call, spec.timeout_s)
        except TimeoutError:
            raise JobTimeout(f"{spec.name} ran longer than its timeout of {spec.timeout_s} s") from None

    def _succeeded(self, job: Job, duration_s: float) -> None:
        self._acks.append(job.entry_id)
        batch = job.fields.get("replay_batch")
        if batch:
            self._replay_outcomes.append(
                (
                    batch,
                    job.fields.get("replay_of", job.entry_id),
                    json.dumps({"status": "succeeded", "at": now_iso()}),
                )
            )
        for observer in self.observers:
            observer.job_finished(job.kind, "succeeded", duration_s, None)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "Job %s %s succeeded in %.1f ms.",
                job.kind,
                job.job_id,
                duration_s * 1000,
                extra=self._log_extra(job, "succeeded", duration_s),
            )

    async def _failed(self, spec: KindSpec, job: Job, exc: BaseException, duration_s: float) -> None:
        decision = decide(spec.retry, job.attempts, self._rng)
        error = describe_error(exc)
        if isinstance(decision, DeadLetter):
            dead_id = await self._bury(
                job.entry_id,
                reason=wire.REASON_EXHAUSTED,
                attempts=decision.attempts,
                error=error,
                tb=bounded_traceback(exc, self.settings.traceback_bytes),
            )
            outcome = "dead"
            log.error(
                "Job %s %s failed on attempt %d of %d after %.1f ms and was dead-lettered as %s: %s",
                job.kind,
                job.job_id,
                decision.attempts,
                spec.retry.retries + 1,
                duration_s * 1000,
                dead_id,
                error,
                extra=self._log_extra(job, outcome, duration_s, reason=wire.REASON_EXHAUSTED),
            )
            await self._record_replay(job, {"status": "failed", "dead_id": dead_id, "error": error})
        else:
            run_at = time.time() + decision.delay_s
            member = wire.encode_member({**job.fields, "attempts": str(decision.attempts)})
            await self._with_redis(lambda: self.scripts.retry(job.entry_id, run_at, member))
            if decision.delay_s < 1.0:
                self._promote_at(decision.delay_s)
            outcome = "retried"
            log.warning(
                "Job %s %s failed on attempt %d of %d after %.1f ms (%s); retrying in %.2f s.",
                job.kind,
                job.job_id,
                decision.attempts,
                spec.retry.retries + 1,
                duration_s * 1000,
                error,
                decision.delay_s,
                extra=self._log_extra(job, outcome, duration_s),
            )
            await self._record_replay(job, {"status": "retrying", "attempts": decision.attempts, "error": error})
        for observer in self.observers:
            observer.job_finished(job.kind, outcome, duration_s, wire.REASON_EXHAUSTED if outcome == "dead" else None)

    async def _bury_malformed(self, bad: wire.Malformed) -> None:
        dead_id = await self._bury(bad.entry_id, reason=bad.reason, attempts=0, error=bad.error, tb="")
        log.error(
            "Entry %s could not run and was dead-lettered as %s (%s): %s",
            bad.entry_id,
            dead_id,
            bad.reason,
            bad.error,
            extra={"kind": bad.kind or None, "outcome": "dead", "reason": bad.reason},
        )
        for observer in self.observers:
            observer.job_finished(bad.kind or "?", "dead", 0.0, bad.reason)

    async def _bury(
        self,
        entry_id: str,
        *,
        reason: str,
        attempts: int,
        error: str,
        tb: str,
        min_idle_ms: int = 0,
    ) -> str | None:
        fields = {
            "attempts": str(attempts),
            "error": error,
            "traceback": tb,
            "reason": reason,
            "failed_at": now_iso(),
            "worker": self.name,
        }
        dead_id = await self._with_redis(
            lambda: self.scripts.bury(entry_id, fields, maxlen=self.settings.dead_ceiling, min_idle_ms=min_idle_ms)
        )
        return None if dead_id is None else wire.text(dead_id)

    async def _record_replay(self, job: Job, outcome: dict[str, Any]) -> None:
        batch = job.fields.get("replay_batch")
        if not batch:
            return
        key = self.keys.replay(batch)
        outcome["at"] = now_iso()
        replay_of = job.fields.get("replay_of", job.entry_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(key, replay_of, json.dumps(outcome))
        pipe.expire(key, REPLAY_OUTCOME_TTL_S)
        if self.settings.archive_on and outcome.get("dead_id"):
            pipe.xadd(
                self.keys.dead_log, outcome_record(replay_of, batch, dead_again=outcome["dead_id"], at=outcome["at"])
            )
        await self._with_redis(pipe.execute)

    async def _with_redis(self, call: Any, attempts: int = 8) -> Any:
        """Run a Redis call, retrying with backoff while the connection is away."""
        for attempt in range(attempts):
            try:
                return await call()
            except CONNECTION_ERRORS:
                if attempt == attempts - 1:
                    raise
                await asyncio.sleep(min(5.0, 0.05 * 2**attempt))
        raise AssertionError("unreachable")

    def _log_extra(self, job: Job, outcome: str, duration_s: float, reason: str | None = None) -> dict[str, Any]:
        return {
            "kind": job.kind,
            "job_id": job.job_id,
            "attempt": job.attempts + 1,
            "outcome": outcome,
            "duration_ms": round(duration_s * 1000, 3),
            "reason": reason,
            "request_id": job.fields.get("request_id"),
            "trace": job.fields.get("trace"),
        }

    # ---------------------------------------------------------------- chores

    def chores(self) -> list[Chore]:
        """The worker's own timed chores, then any the caller added (scheduler, relay, metrics)."""
        refresh_s = max(0.05, self.settings.reclaim_idle_ms / 3000)
        return [
            Chore("promote", 1.0, self.promote_due),
            Chore("reclaim", self.settings.reclaim_interval_s, self.reclaim),
            Chore("refresh-claims", refresh_s, self.refresh_claims),
            Chore("heartbeat", HEARTBEAT_INTERVAL_S, self.heartbeat),
            Chore("trim", 1.0, self.trim),
            Chore("forget-consumers", 60.0, self.forget_consumers),
            Chore("summary", SUMMARY_INTERVAL_S, self.summary),
            *self.extra_chores,
        ]

    async def promote_due(self) -> float:
        """Move due delayed jobs onto ``jobs``; sleep until the next one is due (at most 1 s)."""
        while await self.scripts.promote(time.time(), 100) == 100:
            pass
        head = await self.redis.zrange(self.keys.delayed, 0, 0, withscores=True)
        if not head:
            return 1.0
        return max(0.01, min(1.0, float(head[0][1]) - time.time()))

    def _promote_at(self, delay_s: float) -> None:
        """Promote once more after ``delay_s``: a retry due sooner than the chore's next wake."""

        async def later() -> None:
            if not await sleep_or_stop(delay_s, self.stopping):
                with contextlib.suppress(*CONNECTION_ERRORS):
                    await self.promote_due()

        task = asyncio.create_task(later())
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    async def reclaim(self) -> None:
        """Dead-letter poison entries; claim other idle pending entries and run each alone."""
        idle_ms = self.settings.reclaim_idle_ms
        pending: list[dict[str, Any]] = await self.redis.xpending_range(
            self.keys.jobs, GROUP, min="-", max="+", count=100, idle=idle_ms
        )
        for item in pending:
            if self.stopping.is_set():
                return
            entry_id = item["message_id"].decode()
            deliveries = int(item["times_delivered"])
            consumer = item["consumer"].decode()
            if deliveries >= self.settings.max_deliveries:
                await self._bury_poison(entry_id, deliveries, consumer, idle_ms)
                continue
            await self._run_alone(entry_id, idle_ms, consumer, deliveries)

    async def _bury_poison(self, entry_id: str, deliveries: int, consumer: str, idle_ms: int) -> None:
        """Dead-letter an entry that killed its worker ``deliveries`` times, without running it."""
        error = (
            f"Poison: delivered {deliveries} times (MAX_DELIVERIES={self.settings.max_deliveries}) "
            f"without an outcome; last consumer {consumer}"
        )
        dead_id = await self._bury(
            entry_id, reason=wire.REASON_POISON, attempts=deliveries, error=error, tb="", min_idle_ms=idle_ms
        )
        if not dead_id:
            return  # claimed or acknowledged since XPENDING looked: not poison after all
        # The entry was never parsed here; its kind and job id are read back from the dead entry (a rare path).
        found: Any = await self.redis.xrange(self.keys.dead, dead_id, dead_id)
        fields: dict[bytes, bytes] = found[0][1] if found else {}
        kind = fields.get(b"kind", b"?").decode(errors="replace")
        job_id = fields.get(b"job_id", fields.get(b"outbox_id", b"?")).decode(errors="replace")
        log.error(
            "Job %s %s (entry %s) killed its worker %d times and was dead-lettered as poison (%s).",
            kind,
            job_id,
            entry_id,
            deliveries,
            dead_id,
            extra={
                "kind": kind,
                "job_id": job_id,
                "attempt": deliveries,
                "outcome": "dead",
                "reason": wire.REASON_POISON,
            },
        )
        for observer in self.observers:
            observer.job_finished(kind, "dead", 0.0, wire.REASON_POISON)

    async def _run_alone(self, entry_id: str, idle_ms: int, previous: str, deliveries: int) -> None:
        """Claim one idle entry and run it with nothing else in flight in this worker."""
        async with self._reading:
            while self.inflight:
                self._slot_freed.clear()
                await self._slot_freed.wait()
            claimed: list[Any] = await self.redis.xclaim(self.keys.jobs, GROUP, self.name, idle_ms, [entry_id])
            if not claimed or claimed[0] is None or claimed[0][1] is None:
                return
            log.warning(
                "Reclaimed entry %s from %s (delivery %d); running it alone.",
                entry_id,
                previous,
                deliveries + 1,
            )
            self._start(entry_id, claimed[0][1], alone=True)
            await asyncio.shield(self.inflight[entry_id])

    async def refresh_claims(self) -> None:
        """Reset the idle time of entries running longer than a third of RECLAIM_IDLE_MS."""
        horizon = time.monotonic() - self.settings.reclaim_idle_ms / 3000
        old = [eid for eid, started in list(self.started_at.items()) if started < horizon]
        if old:
            await self.scripts.refresh_claims(self.name, old)

    async def heartbeat(self) -> None:
        """Say this worker is alive (for health checks and consumer clean-up)."""
        info = json.dumps({"at": now_iso(), "inflight": len(self.inflight), "slots": self.settings.concurrency})
        await self.redis.set(self.keys.heartbeat(self.name), info, ex=HEARTBEAT_TTL_S)

    async def trim(self) -> None:
        """Keep ``jobs`` bounded: drop acknowledged entries, never undelivered or pending ones."""
        await self.scripts.trim()

    async def forget_consumers(self) -> None:
        """Remove consumers of dead workers once they own nothing."""
        removed = await self.scripts.forget_consumers(max(self.settings.reclaim_idle_ms, 60_000))
        if removed:
            log.info("Removed dead consumers from the group: %s.", ", ".join(n.decode() for n in removed))

    async def summary(self) -> None:
        self._log_summary()

    def _log_summary(self) -> None:
        counts, elapsed = self.tally.take()
        if not counts:
            return
        total = sum(counts.values())
        parts = ", ".join(f"{kind} {outcome} {n}" for (kind, outcome), n in sorted(counts.items()))
        log.info(
            "Processed %d jobs in %.0f s (%.0f/s): %s.",
            total,
            elapsed,
            total / max(elapsed, 1e-9),
            parts,
        )
