"""May this entry start now? The workers' side of pause and throttle (``opslib.pause``, ``opslib.throttle``).

Every worker reads the pauses (partition 0's ``paused``) and the throttles
(``throttles``) every quarter second (:meth:`Gate.refresh`, a chore, and once
before the first read, so a worker started while a kind is paused respects
it): an operator's pause or throttle is honoured within a second.

A job of a paused kind is parked at once (park script: ``parked`` + XACK),
not run, not counted, not dead-lettered: it holds its slot only for that one
round trip. The script checks the partition's own copy of the pause, so a
resume that ran since the last look lets the job run instead.

A job of a throttled kind asks its kind's schedule for a turn (take_token:
one schedule for all workers, turns 1/rate apart by Redis's clock; the
script reads the rate in force itself, so a throttle set, changed or lifted
counts at once). A turn due now starts the job. A turn due within
:data:`HOLD_S` is waited for in the slot, on a timer. A later one is a
reservation: the job is deferred to ``throttled`` until that turn, with its
attempts unchanged and the turn in its field ``throttle_turn`` (the retry
script's move), and the promoter is woken for that moment (not left to its
next round); back on ``jobs``, the job shows its ticket and starts (what
remains of its wait, a few milliseconds early, held in the slot) without
queueing again. The field is dropped before the handler runs, so a retry
asks for a turn of its own (a job a lift released runs with it: a turn of a
schedule gone, which no later one honours). Jobs of other kinds pass with
one set lookup.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from worker.app import Chore
from worker.kinds import Job, Registry
from worker.loop.episode import outcome_key
from worker.store.keys import Keys
from worker.store.server_clock import CLOCK
from worker.store.wire import encode_member, json_object, text

if TYPE_CHECKING:
    from worker.loop.partition_reader import PartitionReader
    from worker.store.scripts import Scripts

log = logging.getLogger("worker")

REFRESH_INTERVAL_S = 0.25
#: A turn due within this many seconds is waited for in the slot; a later one defers the job to ``throttled``.
HOLD_S = 0.05
#: The job field that carries a deferred job's turn (``<generation>:<epoch seconds>``) while it waits.
TICKET = "throttle_turn"
#: A promoter wake comes this much after a turn: Redis's clock, which promote reads, is only estimated here.
WAKE_MARGIN_S = 0.002
#: The deferrals' promoter wakes this worker has asked for, remembered to ask once per millisecond.
WAKES_KEPT = 1000


class Gate:
    """The pauses and rates this worker honours, and the moves for the jobs they hold back."""

    def __init__(
        self,
        redis_client: Any,
        keys: Keys,
        partition0: Keys,
        registry: Registry,
        wake: Callable[[Scripts, float], None] = lambda _scripts, _delay_s: None,
    ) -> None:
        self.redis = redis_client
        self.wake = wake
        """Promote a partition after so many seconds (:meth:`Upkeep.promote_soon`): a deferred job's turn."""
        self._wakes: dict[tuple[int, int], float] = {}
        self.keys = keys
        self.partition0 = partition0
        self.defaults = {name: spec.rate_limit for name, spec in registry.kinds.items() if spec.rate_limit}
        self.paused: dict[str, dict[str, Any]] = {}
        self.rates: dict[str, float] = dict(self.defaults)
        self.held: frozenset[str] = frozenset(self.rates)
        """The kinds paused or throttled now: the only ones :meth:`admit` need see."""

    def chore(self) -> Chore:
        return Chore("gate", REFRESH_INTERVAL_S, self.refresh)

    async def refresh(self) -> None:
        """Read the pauses and throttles; log each change."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self.partition0.paused)
        pipe.hgetall(self.keys.throttles)
        paused_raw, throttles_raw = await pipe.execute()
        paused = {text(kind): json_object(value) for kind, value in paused_raw.items()}
        rates = dict(self.defaults)
        for kind, value in throttles_raw.items():
            per_s = json_object(value).get("per_s")
            if isinstance(per_s, int | float) and per_s > 0:
                rates[text(kind)] = float(per_s)
        for kind in paused.keys() - self.paused.keys():
            log.info("Kind %s is paused: its jobs wait in parked until resumed.", kind)
        for kind in self.paused.keys() - paused.keys():
            log.info("Kind %s is resumed.", kind)
        if rates != self.rates:
            log.info("Throttles now: %s.", ", ".join(f"{k} {v:g}/s" for k, v in sorted(rates.items())) or "none")
        self.paused, self.rates = paused, rates
        self.held = frozenset(paused) | frozenset(rates)

    async def admit(self, part: PartitionReader, job: Job) -> bool:
        """True: run ``job`` now. False: it was parked or deferred (its entry acknowledged by the move),
        or another worker took it (the fence: the move changed nothing, counted and said once).

        Each call waits out a lost connection or a refusal as a decided outcome does
        (:meth:`worker.loop.episode.Episode.land`): the entry keeps its slot, and its claim stays fresh."""
        scripts, outcomes = part.scripts, part.outcomes
        if job.kind in self.paused:
            move = functools.partial(scripts.park, job.entry_id, job.kind, consumer=part.consumer)
            parked = await outcomes.episode.land(outcome_key(part.keys, job.entry_id), move)
            if parked == -1:
                outcomes.stale.dropped("park", [job.entry_id], job)
            if parked != 0:
                return False
        if job.kind not in self.rates:
            return True
        return await self._take_turn(part, job)

    async def _take_turn(self, part: PartitionReader, job: Job) -> bool:
        """Start ``job`` at its turn: now, after a short hold in the slot, or deferred (False) until it."""
        ticket, land, key = job.field(TICKET), part.outcomes.episode.land, outcome_key(part.keys, job.entry_id)
        ask = functools.partial(part.scripts.take_token, job.kind, self.defaults.get(job.kind), ticket, HOLD_S)
        reply = await land(key, ask)
        wait_s, turn = float(reply[0]), text(reply[1])
        if wait_s > HOLD_S:
            fields = {**job.fields, TICKET: turn}
            due = float(turn.partition(":")[2])
            member = encode_member(fields)
            defer = functools.partial(part.scripts.defer, job.entry_id, due, member, consumer=part.consumer)
            if not await land(key, defer):
                part.outcomes.stale.dropped("deferral", [job.entry_id], job)
                return False
            self._wake_at(part, due)
            return False
        if wait_s > 0:
            await asyncio.sleep(wait_s)  # the turn is this job's: a timer, not a poll
        if ticket:
            job.fields.pop(TICKET, None)  # the handler and a retry see the job as it was enqueued
        return True

    def _wake_at(self, part: PartitionReader, due: float) -> None:
        """Ask the promoter to move ``part``'s deferred jobs at ``due`` (Redis's time), once per millisecond."""
        key = (part.index, math.ceil(due * 1000))
        if key in self._wakes:
            return
        now = CLOCK.now()
        if len(self._wakes) >= WAKES_KEPT:
            self._wakes = {k: at for k, at in self._wakes.items() if at > now}
        self._wakes[key] = due
        self.wake(part.scripts, max(0.0, due - now) + WAKE_MARGIN_S)
