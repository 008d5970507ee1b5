"""The outcome of one entry: succeed, retry or dead-letter, and a replayed job's record of it.

A success is acknowledged with the loop's next read (the acknowledgements
ride in the same round trip as XREADGROUP). Every settle is fenced: it lands
only while the entry is still this worker's (:mod:`worker.loop.fence`).
Every move is kept until it lands
(:meth:`worker.loop.episode.Episode.land`): when Redis refuses it, the outcome
already decided waits and is tried again; the handler does not run again. A failure asks the kind's policy
(:func:`worker.retry.decide`): a retry is one script (ZADD ``delayed`` +
XACK), a dead letter another (XADD ``jobs:dead`` + XACK). Every way to
``jobs:dead`` (exhausted, permanent, malformed, unknown_kind, poison) goes
through :meth:`Outcomes.dead_letter`, which writes the entry, the log line
and the observers' report in one place; :mod:`worker.loop.burial` builds what
the moves carry (a dead entry's fields, a retry's member with its
``attempt_log``).

The attempt's ``process`` span, when the worker traces, is marked here too
(:mod:`worker.loop.tracing`; the executor records the exception): the outcome,
and its context as ``trace_link`` on the retried job and the dead letter.

A job that carries ``replay_batch`` (a replay put it back) also records its
outcome in ``replay:<batch>`` for ``opslib.replay_status`` and, with the
archive on, its final outcome (succeeded, or failed again) in
``jobs:dead:log`` for the archive's row.
"""

from __future__ import annotations

import functools
import json
import logging
import random
from collections.abc import Callable, Iterable
from typing import Any

import redis.asyncio as aioredis

from worker.archive.dead_log import outcome_record
from worker.kinds import Job, KindSpec
from worker.loop.burial import Burial, dead_fields, dead_log_line, log_fields, poison_log_line, retry_member
from worker.loop.episode import Episode, outcome_key
from worker.loop.fence import StaleSettles
from worker.loop.observe import Successes
from worker.loop.tracing import link_field, mark_dead, retrying
from worker.loop.unique_acks import UniqueAcks, lock_of_entry
from worker.observability.observer import Observer
from worker.retry import Retry, decide
from worker.settings import Settings
from worker.store import wire
from worker.store.failures import bounded_traceback, describe_error, now_iso
from worker.store.keys import REPLAY_OUTCOME_TTL_S
from worker.store.scripts import Scripts
from worker.store.server_clock import CLOCK
from worker.store.unique import lock_of
from worker.store.vocabulary import (
    OUTCOME_DEAD,
    OUTCOME_RETRIED,
    OUTCOME_SUCCEEDED,
    REASON_PERMANENT,
    REASON_POISON,
    RECORDED_FAILED,
    RECORDED_RETRYING,
    RECORDED_SUCCEEDED,
)
from worker.store.wire import text

log = logging.getLogger("worker")


class Outcomes:
    """Records what became of each entry this worker ran or found.

    ``acks`` and ``replay_outcomes`` gather successes until the loop sends
    them (:meth:`take_acks`, :meth:`flush`). ``promote_soon(delay_s)`` asks
    for a promotion before the promoter's next wake, for retries due sooner.
    """

    def __init__(
        self,
        redis_client: aioredis.Redis,
        scripts: Scripts,
        settings: Settings,
        observers: Iterable[Observer],
        *,
        promote_soon: Callable[[float], None],
        episode: Episode | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.redis = redis_client
        self.settings = settings
        self.name = settings.worker_name
        self.scripts = scripts
        self.keys = scripts.keys
        self.observers = list(observers)
        self.promote_soon = promote_soon
        self.episode = episode or Episode()
        self.rng = rng or random.Random()
        self.stale = StaleSettles(self.keys.jobs)  # settles the fence dropped (:mod:`worker.loop.fence`)
        self.acks: list[str] = []
        self.replay_outcomes: list[tuple[str, str, str]] = []
        self.releases = UniqueAcks(self.keys)  # successes holding a unique key, acknowledged by :meth:`flush`
        self.successes = Successes(self.observers, self.keys.queue)
        """The successes not yet reported, handed over with their acknowledgements (:meth:`take_acks`)."""
        self.debug = log.isEnabledFor(logging.DEBUG)
        """A success's DEBUG line is on: asked again at each hand-over, not at each job."""

    # ---------------------------------------------------------- successes

    def succeeded(self, job: Job, duration_s: float) -> None:
        """Queue the acknowledgement of a job whose handler returned (sent with the next read)."""
        self.releases.acknowledge(job, self.acks)  # with the next read; holding a unique key, by flush
        batch = job.field("replay_batch")  # one field: the others stay undecoded unless the handler read them
        if batch:
            outcome = json.dumps({"status": RECORDED_SUCCEEDED, "at": now_iso()})
            self.replay_outcomes.append((batch, job.fields.get("replay_of", job.entry_id), outcome))
        successes = self.successes
        successes.kinds.append(job.kind)
        successes.durations_s.append(duration_s)
        if self.debug:
            log.debug(
                "Job %s %s succeeded in %.1f ms.",
                job.kind,
                job.job_id,
                duration_s * 1000,
                extra=log_fields(job, OUTCOME_SUCCEEDED, duration_s),
            )

    def take_acks(self) -> list[str]:
        """The acknowledgements gathered so far, for the loop to send (give them back if it cannot); their
        successes go to the observers now."""
        self._hand_over()
        acks, self.acks = self.acks, []
        return acks

    def _hand_over(self) -> None:
        self.successes.hand_over()
        self.debug = log.isEnabledFor(logging.DEBUG)

    def give_back_acks(self, acks: list[str]) -> None:
        self.acks[:0] = acks

    async def flush_kept(self, what: str) -> None:
        """:meth:`flush` until it lands (an episode keeps what could not be sent; ``what`` names it)."""
        await self.episode.land(f"{self.keys.queue}/{self.keys.partition}/{what}", self.flush)

    async def flush(self) -> None:
        """Send the acknowledgements and replay outcomes gathered so far (their successes go to the observers)."""
        self._hand_over()
        await self.releases.send(self.scripts, self.name, self.stale)
        acks, outcomes = self.acks, self.replay_outcomes
        if not acks and not outcomes:
            return
        self.acks, self.replay_outcomes = [], []
        pipe = self.redis.pipeline(transaction=False)
        for batch, field, value in outcomes:
            pipe.hset(self.keys.replay(batch), field, value)
            pipe.expire(self.keys.replay(batch), REPLAY_OUTCOME_TTL_S)
            if self.settings.archive_on:
                pipe.xadd(self.keys.dead_log, outcome_record(field, batch, dead_again=None, at=now_iso()))
        try:
            await self.stale.ack(self.scripts, self.name, acks)  # fenced: only the entries still ours
            acks = []  # landed: not given back if the replay outcomes fail
            await pipe.execute()  # (no round trip without replay outcomes)
        except BaseException:
            self.acks[:0], self.replay_outcomes[:0] = acks, outcomes
            raise

    # ----------------------------------------------------------- failures

    async def failed(self, spec: KindSpec, job: Job, exc: BaseException, duration_s: float) -> None:
        """The handler raised: retry the job or dead-letter it, as the kind's policy decides."""
        decision = decide(spec.retry, job.attempts, type(exc), self.rng)
        error = describe_error(exc)
        of = f"attempt {decision.attempts} of {spec.retry.retries + 1} after {duration_s * 1000:.1f} ms"
        if isinstance(decision, Retry):
            await self._retry(job, decision, error, of, duration_s)
            return
        await self.dead_letter(
            Burial(
                job.entry_id,
                reason=decision.reason,
                attempts=decision.attempts,
                error=error,
                happened=f"failed permanently on {of}" if decision.reason == REASON_PERMANENT else f"failed on {of}",
                traceback=bounded_traceback(exc, self.settings.traceback_bytes),
                job=job,
                kind=job.kind,
                duration_s=duration_s,
            )
        )

    async def _retry(self, job: Job, decision: Retry, error: str, of: str, duration_s: float) -> None:
        run_at = CLOCK.now() + decision.delay_s  # Redis's time: a wrong local clock runs no retry early
        extra = log_fields(job, OUTCOME_RETRIED, duration_s)
        fields = retry_member(
            job, decision.attempts, error=error, duration_s=duration_s, worker=self.name, at=now_iso()
        )
        member = wire.encode_member(fields | retrying(error, decision))
        move = functools.partial(self.scripts.retry, job.entry_id, run_at, member, consumer=self.name)
        if not await self.episode.land(outcome_key(self.keys, job.entry_id), move):
            return self.stale.dropped("retry", [job.entry_id], job)
        if decision.delay_s < 1.0:
            self.promote_soon(decision.delay_s)
        log.warning(
            "Job %s %s failed on %s (%s); retrying in %.2f s.",
            job.kind,
            job.job_id,
            of,
            error,
            decision.delay_s,
            extra=extra,
        )
        for observer in self.observers:
            observer.job_finished(job.kind, OUTCOME_RETRIED, duration_s, None, self.keys.queue)
        await self.record_replay(job, {"status": RECORDED_RETRYING, "attempts": decision.attempts, "error": error})

    async def malformed(self, bad: wire.Malformed) -> None:
        """Dead-letter an entry that is not a job it can run (never run: attempts 0)."""
        happened = f"could not run ({bad.reason})"
        await self.dead_letter(
            Burial(
                bad.entry_id,
                reason=bad.reason,
                attempts=0,
                error=bad.error,
                happened=happened,
                kind=bad.kind,
                kept=bad.kept,
                lock=await lock_of_entry(self.redis, self.keys, bad.entry_id, self.episode),  # an unknown kind's too
            )
        )

    async def poison(self, entry_id: str, deliveries: int, consumer: str, idle_ms: int) -> str | None:
        """Dead-letter an entry that killed its worker ``deliveries`` times, without running it.

        Only if it is still pending and idle ``idle_ms``: else it was claimed or
        acknowledged since the reclaim loop looked, and is not poison after all.
        Its log line names the kind and job id its dead entry holds (read back:
        the entry was never parsed here).
        """
        error = (
            f"Poison: delivered {deliveries} times (MAX_DELIVERIES={self.settings.max_deliveries}) "
            f"without an outcome; last consumer {consumer}"
        )
        happened = f"killed its worker {deliveries} times"
        burial = Burial(
            entry_id,
            reason=REASON_POISON,
            attempts=deliveries,
            error=error,
            happened=happened,
            kind=None,
            min_idle_ms=idle_ms,
            lock=await lock_of_entry(self.redis, self.keys, entry_id, self.episode),
        )
        dead_id = await self.dead_letter(burial)
        if dead_id is not None:
            found: Any = await self.redis.xrange(self.keys.dead, dead_id, dead_id)
            dead = {text(k): text(v) for k, v in (found[0][1] if found else {}).items()}
            report_dead(self.observers, self.keys.queue, burial, dead_id, poison_log_line(dead, burial))
        return dead_id

    async def dead_letter(self, burial: Burial) -> str | None:
        """Move the entry to ``jobs:dead`` (bury script: XADD dead + XACK), log it, tell the observers.

        Returns the dead entry's id, or None when the entry was no longer
        pending (another worker recorded its outcome, or claimed it since).
        A poison entry's log line and report are :meth:`poison`'s.
        """
        line = dead_log_line(burial)
        fields = dead_fields(burial, worker=self.name, at=now_iso()) | link_field()
        buried = await self.episode.land(
            outcome_key(self.keys, burial.entry_id),
            lambda: self.scripts.bury(
                burial.entry_id,
                fields,
                maxlen=self.settings.dead_ceiling,
                min_idle_ms=burial.min_idle_ms,
                keep_original=burial.kept is None,
                consumer="" if burial.min_idle_ms else self.name,  # poison: the dead owner's entry, idle
                lock=burial.lock if burial.job is None else lock_of(self.keys, burial.job.fields),
            ),
        )
        if buried is None:
            if not burial.min_idle_ms:
                self.stale.dropped("dead letter", [burial.entry_id], burial.job)
            return None
        dead_id = wire.text(buried)
        mark_dead(burial.reason, burial.error, dead_id)
        if line is not None:
            report_dead(self.observers, self.keys.queue, burial, dead_id, line)
        if burial.job is not None:
            await self.record_replay(burial.job, {"status": RECORDED_FAILED, "dead_id": dead_id, "error": burial.error})
        return dead_id

    async def record_replay(self, job: Job, outcome: dict[str, Any]) -> None:
        """For a replayed job, record ``outcome`` in its batch's ``replay:<batch>`` hash."""
        batch = job.fields.get("replay_batch")
        if not batch:
            return
        key = self.keys.replay(batch)
        outcome["at"] = now_iso()

        replay_of = job.fields.get("replay_of", job.entry_id)
        dead_again = outcome.get("dead_id")

        async def write() -> None:
            # A fresh pipeline per try: an executed pipeline is empty.
            pipe = self.redis.pipeline(transaction=False)
            pipe.hset(key, replay_of, json.dumps(outcome))
            pipe.expire(key, REPLAY_OUTCOME_TTL_S)
            if self.settings.archive_on and dead_again:
                # The final outcome for the archive's row (jobs:dead:log; the archiver applies it).
                pipe.xadd(self.keys.dead_log, outcome_record(replay_of, batch, dead_again=dead_again, at=outcome["at"]))
            await pipe.execute()

        await self.episode.land(outcome_key(self.keys, job.entry_id), write)


def report_dead(
    observers: list[Observer], queue: str, burial: Burial, dead_id: str, line: tuple[str, dict[str, Any]]
) -> None:
    """The dead letter's log line (``line``: its subject and fields) and the observers' report (``queue``: the
    named queue of the entry's partition)."""
    subject, extra = line
    log.error("%s %s and was dead-lettered as %s: %s", subject, burial.happened, dead_id, burial.error, extra=extra)
    for observer in observers:
        observer.job_finished(extra["kind"] or "?", OUTCOME_DEAD, burial.duration_s, burial.reason, queue)
