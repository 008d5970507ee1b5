"""A worker never fails what it cannot understand: old payloads upcast, newer ones handed back.

During a rolling deploy old and new workers read the same stream. After
parsing, :meth:`HandBack.fit` decides for each entry (:func:`placement`):

- a payload of the kind's version runs as it is; an older one runs through the
  kind's upcasters first (:meth:`worker.kinds.KindSpec.upcasted`);
- a version above the worker's, or a kind it lacks, that another live worker
  serving the entry's named queue declares (:class:`Fleet`): handed back onto
  the queue's ``jobs`` for that worker;
- a version no live worker of the queue runs yet: handed back into the queue's
  ``delayed`` for :data:`WAIT_S`, to be looked at again; it waits there, never
  dead;
- a kind no live worker of the queue declares: it waits while a worker (of any
  queue) declared it within
  ``UNKNOWN_KIND_GRACE_S`` (a setting; this worker's memory of the fleet), or
  while the job carries ``v`` (enqueued by code that declares the kind: a kind
  added before its first worker is up) and has waited less than the grace;
  else it is dead-lettered as ``unknown_kind`` at once, as before (a typo).

Every hand-back is one script (``hand_back.lua``: owner-checked XACK + XDEL,
and XADD or ZADD of the copy): the copy is a fresh entry, so a hand-back is no
delivery (never toward ``MAX_DELIVERIES``) and no failure. The copy carries
``handed_back`` (how many times) and, while it waits, ``waiting_since``.

Old workers free their slots at once and so read more of the stream: at its
tail a copy went round them many times (24 to 53 for the slowest in a 50:50
rollout). A worker handing back a copy that came round already reads nothing
new for a while (:data:`REST_S` per earlier hand-back), so the copy reaches a
worker that can run it.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterable
from typing import Any

from worker.app import Chore
from worker.kinds import Job, KindSpec
from worker.loop.episode import outcome_key
from worker.loop.partition_reader import PartitionReader
from worker.loop.slots import Raw
from worker.observability.observer import Observer, overrides
from worker.store import wire
from worker.store.awaiting import WAIT_S
from worker.store.heartbeats import HEARTBEAT_INTERVAL_S, live_workers_async
from worker.store.keys import Keys
from worker.store.server_clock import CLOCK
from worker.store.versions import HANDED_BACK_FIELD, VERSION_FIELD, WAITING_SINCE_FIELD, version_of
from worker.store.vocabulary import REASON_MALFORMED

log = logging.getLogger("worker")

#: How long a worker reads nothing new after handing back, for a live worker, a copy that another
#: worker unable to run it had handed back already, per time it had (at most :data:`WAIT_S`): at the
#: stream's tail the copy then reaches a worker waiting in a read, one that can run it, instead of going
#: round the workers that cannot.
REST_S = 0.5

RUN, HAND_BACK, WAIT, DEAD = "run", "hand back", "wait", "dead"


def placement(kind: str, version: int, mine: int | None, fleet: dict[str, int], awaited: bool) -> str:
    """What to do with a payload of ``kind`` at ``version``: :data:`RUN` it here, :data:`HAND_BACK` it for a
    live worker that can, :data:`WAIT` for one, or bury it :data:`DEAD` (a kind nobody declares).

    ``mine``: the version this worker runs of the kind (None: it lacks the kind); ``fleet``: the
    highest version each kind's live workers serving the entry's queue declare; ``awaited``: a worker
    able to run a kind this worker lacks is to be waited for (:meth:`HandBack.lacking`).
    """
    if mine is not None and version <= mine:
        return RUN
    if fleet.get(kind, 0) >= version:
        return HAND_BACK
    if mine is not None or awaited:
        return WAIT
    return DEAD


class Fleet:
    """What the live workers run: the highest payload version of each kind in each named queue, read from
    their declarations (``kinds:<worker>``, with the queues each serves) every heartbeat, and when each
    kind was last seen declared (by a worker of any queue).

    An entry is handed back onto its queue only for a worker that serves that queue (:meth:`versions_in`):
    a worker of ``bulk`` never reads ``default``'s stream, so a copy handed back there for it would go round
    the workers of ``default`` instead of waiting. A declaration without ``queues`` (a worker from before
    named queues) counts for every queue. ``grace_s`` (``UNKNOWN_KIND_GRACE_S``): a kind declared within
    this long is not dead-lettered as unknown; its entries wait for a worker."""

    def __init__(self, redis_client: Any, keys: Keys, grace_s: float) -> None:
        self.redis = redis_client
        self.keys = keys
        self.grace_s = grace_s
        self.queues: dict[str | None, dict[str, int]] = {}
        """Queue name (None: every queue) -> kind -> the highest version its live workers there run."""
        self.seen: dict[str, float] = {}

    def chore(self) -> Chore:
        return Chore("fleet", HEARTBEAT_INTERVAL_S, self.refresh)

    async def refresh(self) -> None:
        names = sorted(await live_workers_async(self.redis, self.keys))
        declared = [await self.redis.get(self.keys.declared(name)) for name in names]
        queues: dict[str | None, dict[str, int]] = {}
        for value in declared:
            declaration = wire.json_object(value or "{}")
            kinds = declaration.get("kinds", {})
            served = declaration.get("queues")
            for queue in served if isinstance(served, list) and served else [None]:
                versions = queues.setdefault(queue if isinstance(queue, str) else None, {})
                for kind, policy in kinds.items() if isinstance(kinds, dict) else ():
                    version = policy.get("version", 1) if isinstance(policy, dict) else 1
                    versions[kind] = max(versions.get(kind, 0), version if isinstance(version, int) else 1)
        now = time.time()
        self.seen.update(dict.fromkeys((kind for versions in queues.values() for kind in versions), now))
        self.queues = queues

    def versions_in(self, queue: str) -> dict[str, int]:
        """The highest version of each kind that a live worker serving ``queue`` runs."""
        versions = dict(self.queues.get(None, {}))
        for kind, version in self.queues.get(queue, {}).items():
            versions[kind] = max(versions.get(kind, 0), version)
        return versions

    def recent(self, kind: str) -> bool:
        return time.time() - self.seen.get(kind, float("-inf")) < self.grace_s


class HandBack:
    """Fits each parsed entry to this worker (:meth:`fit`, :meth:`lacking`), handing back what it cannot run."""

    def __init__(self, fleet: Fleet | None, observers: Iterable[Observer] = ()) -> None:
        self.fleet = fleet
        self.observers = overrides(observers, "job_handed_back")

    async def fit(self, part: PartitionReader, spec: KindSpec, job: Job, raw: Raw) -> Job | None:
        """``job`` as its handler reads it (upcast), or None: handed back, or its outcome recorded (a bad
        ``v``, an upcaster that raised)."""
        version = version_of(raw.get(VERSION_FIELD.encode()))
        if version is None:
            error = f"MalformedJob: {VERSION_FIELD!r} must be a payload version >= 1, got {job.field('v')!r}"
            await part.outcomes.malformed(wire.Malformed(job.entry_id, REASON_MALFORMED, error, job.kind))
            return None
        if version == spec.version:
            return job
        if version < spec.version:
            try:
                return spec.upcasted(job, version)
            except Exception as exc:
                await part.outcomes.failed(spec, job, exc, 0.0)
                return None
        await self._give_back(part, job.entry_id, (job.kind, version, spec.version), job.fields)
        return None

    async def lacking(self, part: PartitionReader, bad: wire.Malformed, raw: Raw) -> bool:
        """An entry of a kind this worker lacks: True when handed back (another worker runs it, or one
        did recently); False when it is to be dead-lettered as ``unknown_kind``."""
        stamped = raw.get(VERSION_FIELD.encode())
        fields = {wire.text(name): wire.text(value) for name, value in raw.items()}
        return await self._give_back(part, bad.entry_id, (bad.kind, version_of(stamped) or 1, None), fields)

    def _awaited(self, kind: str, fields: dict[str, str]) -> bool:
        """Whether a worker able to run ``kind`` is to be waited for: one declared it within the grace, or
        the job carries ``v`` (code that declares the kind enqueued it) and waits for less than the grace
        (without a fleet to read, nothing is awaited)."""
        if self.fleet is None:
            return False
        if self.fleet.recent(kind):
            return True
        if VERSION_FIELD not in fields:
            return False
        try:
            since = float(fields.get(WAITING_SINCE_FIELD) or CLOCK.now())
        except ValueError:
            return False
        return CLOCK.now() - since < self.fleet.grace_s

    async def _give_back(
        self, part: PartitionReader, entry_id: str, what: tuple[str, int, int | None], fields: dict[str, str]
    ) -> bool:
        """Hand the entry back as :func:`placement` says for ``what`` (kind, version, this worker's version)."""
        kind, version, mine = what
        versions = self.fleet.versions_in(part.keys.queue) if self.fleet else {}
        decision = placement(kind, version, mine, versions, self._awaited(kind, fields))
        if decision == DEAD:
            return False
        copy = dict(fields)
        before = int(copy.get(HANDED_BACK_FIELD, "0") or "0")
        copy[HANDED_BACK_FIELD] = str(before + 1)
        run_at = None
        if decision == HAND_BACK and before:
            part.read_after = time.monotonic() + min(REST_S * before, WAIT_S)
        if decision == WAIT:
            copy.setdefault(WAITING_SINCE_FIELD, repr(CLOCK.now()))
            run_at = CLOCK.now() + WAIT_S  # Redis's time, which promote compares with: a wrong clock waits 5 s too
        move = functools.partial(part.scripts.hand_back, entry_id, part.consumer, run_at, copy)
        if not await part.outcomes.episode.land(outcome_key(part.keys, entry_id), move):
            part.outcomes.stale.dropped("hand-back", [entry_id])
        else:
            for observer in self.observers:
                observer.job_handed_back(kind, run_at is not None, part.queue_name)
            log.debug(
                "Job %s %s (version %d) handed back: %s.",
                kind,
                wire.job_id_of(fields, entry_id),
                version,
                "a live worker runs it" if run_at is None else f"no live worker runs it yet; again in {WAIT_S:g} s",
            )
        return True
