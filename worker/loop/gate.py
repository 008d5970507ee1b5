"""May this entry start now? The workers' side of pause and throttle (``opslib.pause``, ``opslib.throttle``).

Every worker reads the pauses (partition 0's ``paused``) and the throttles
(``throttles``) every quarter second (:meth:`Gate.refresh`, a chore, and once
before the first read, so a worker started while a kind is paused respects
it): an operator's pause or throttle is honoured within a second.

A job of a paused kind is parked at once (park script: ``parked`` + XACK),
not run, not counted, not dead-lettered: it holds its slot only for that one
round trip. The script checks the partition's own copy of the pause, so a
resume that ran since the last look lets the job run instead.

A job of a throttled kind takes a token from its kind's bucket (one for all
workers; the script reads the rate in force itself, so a throttle set,
changed or lifted counts at once); a job refused one is deferred to
``throttled`` with its attempts unchanged (the retry script's move) for the
turn the bucket gives it, and the promoter brings it back then. Jobs of
other kinds pass with one set lookup.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from worker.app import Chore
from worker.kinds import Job, Registry
from worker.store.keys import Keys
from worker.store.wire import encode_member, json_object, text

if TYPE_CHECKING:
    from worker.loop.partition_reader import PartitionReader

log = logging.getLogger("worker")

REFRESH_INTERVAL_S = 0.25
#: A bucket holds a quarter second of tokens (at least one): a start-up burst stays well within a
#: quarter of any 5-second window's jobs.
BURST_S = 0.25


class Gate:
    """The pauses and rates this worker honours, and the moves for the jobs they hold back."""

    def __init__(self, redis_client: Any, keys: Keys, partition0: Keys, registry: Registry) -> None:
        self.redis = redis_client
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
        or another worker took it."""
        scripts = part.scripts
        if job.kind in self.paused:
            parked = await scripts.park(job.entry_id, job.kind)
            if parked != 0:
                return False
        if job.kind not in self.rates:
            return True
        wait_s = float(await scripts.take_token(job.kind, time.time(), self.defaults.get(job.kind), BURST_S))
        if wait_s <= 0:
            return True
        await scripts.defer(job.entry_id, time.time() + wait_s, encode_member(job.fields), consumer=part.consumer)
        return False
