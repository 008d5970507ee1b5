"""Every Redis key the queue uses, built in one place from the prefix.

Nobody else types a key string: the worker, the scheduler, opslib and the
tests all ask a :class:`Keys` for it, so the wire format has one source.

=========================  ==========  ====================  ==========================
key (after QUEUE_PREFIX)   type        written by            read by
=========================  ==========  ====================  ==========================
``jobs``                   stream      enqueue, promote,     workers (group ``workers``)
                                       relay, scheduler,
                                       replay
``delayed``                zset        enqueue, retry        promote (every worker, 1 s)
``jobs:dead``              stream      bury, trim-dead       people, opslib, replay,
                                       (archived entries     discard, the archiver
                                       only)                 (group ``archive``)
``jobs:dead:evicted``      string      bury (INCRBY)         opslib, metrics
``jobs:dead:log``          stream      replay, discard,      archiver (applies each
                                       cancel_delayed,       record, then trims it)
                                       worker (outcomes)
``sched:<name>:<tick>``    string, EX  scheduler (SET NX)    scheduler
``workers``                zset        heartbeat chore       health, forget_consumers,
                           (member:    (ZADD, prunes the     queue_state (metrics, opslib)
                           worker,     expired)              (:mod:`worker.store.heartbeats`)
                           score:
                           expiry)
``replay:<batch>``         hash, EX    replay, worker        opslib.replay_status
``metrics:lock``           string, EX  metrics chore         metrics chore
``flow:m:<start>:<kind>``  hash, EX    flow chore (HINCRBY)  opslib.throughput
``flow:h:<start>:<kind>``  hash, EX    flow chore (HINCRBY)  opslib.throughput
``flow:kinds``             set, EX     flow chore            opslib.throughput
``paused``                 hash        opslib pause, resume  workers (gate, every 0.25 s),
                                       (kind -> JSON: since, park, promote, opslib,
                                       by, reason)           health, metrics
``parked``                 zset, lex   park, promote         unpark (opslib resume),
                                                             opslib (counts)
``throttled``              zset        defer (retry script)  promote (every worker);
                                                             opslib throttle (release)
``throttles``              hash        opslib throttle       workers (gate, take_token),
                                       (kind -> JSON)        opslib, health, metrics
``throttles:<kind>``       hash, EX    take_token (workers)  take_token
``throttles:ran:<kind>``   zset, EX    take_token (workers)  take_token
``kinds:<worker>``         string, EX  declare-kinds chore   opslib.kinds, checks
``cancels``                hash        opslib cancel         workers (each claim refresh),
                                       (job id -> JSON: by,  opslib.find; trimmed by
                                       reason, at, status)   opslib cancel a day after
                                                             no worker holds the entry
``cancel`` (channel)       pub/sub     opslib cancel         workers (the fast path)
``actions:log``            stream      opslib (audited moves opslib (applies it to
                                       while PostgreSQL is   ``operator_actions``)
                                       away)
``queues``                 set         workers (the queues   opslib, health, metrics,
                                       they serve), enqueue  the archiver
                                       (once per process
                                       and queue)
``fair:queue``             zset        enqueue (fair_key=),  fair feeder (workers),
                           (score:     fair feeder (spills   queue_state, backlog
                           turn,       unkeyed entries)      (ZCARD)
                           member: job
                           JSON)
``fair:last``              hash        enqueue, feeder       enqueue, feeder
                           (fair key -> its last turn)
``fair:clock``             string      feeder (the turn of   enqueue, feeder
                                       the job it moved last)
``unique:<kind>:<key>``    hash        enqueue (unique_key); enqueue, opslib.find
                           (job, ref,  released by the job's (:mod:`worker.store.unique`)
                           at, until)  terminal settle
``enqueued:<job_id>``      string, EX  enqueue (a producer's enqueue (a repeat adds
                           (24 h)      own job id)           nothing)
=========================  ==========  ====================  ==========================

Named queues (:mod:`worker.store.queues`): the queue ``default`` has the names
above. Another queue, e.g. ``bulk``, has every per-partition key (``jobs``,
``delayed``, ``jobs:dead``, ``jobs:dead:evicted``, ``jobs:dead:log``,
``replay:<batch>``, ``sched:...``, ``cancels``, ``paused``, ``parked``,
``throttled``, ``flow:...``, ``fair:...``, ``unique:...``, ``enqueued:...``) under ``q:bulk:``:
``<prefix>q:bulk:jobs``,
``<prefix>q:bulk:delayed``, ``<prefix>q:bulk:jobs:dead``, and with partitions
``<prefix>q:bulk:{<tag>}:jobs``. The queue-wide keys (``partitions``,
``workers``, ``kinds:<worker>``, ``throttles``, ``metrics:lock``,
``actions:log``, ``queues``, the ``cancel`` channel) are one for all queues.

The incident desk's keys (:mod:`opslib.moves.incident`): a pause is written
to every partition's ``paused`` (so that park and promote, which run in the
partition's slot, see it atomically) and read by the workers from partition
0's. A paused kind's delivered entries and due delayed jobs wait in the
partition's ``parked``, ordered by kind then by their place on ``jobs``; a
throttled kind's jobs refused a token wait in ``throttled`` (kept apart from
``delayed`` so that ``delayed()`` shows only retries and scheduled jobs, and
so that a lifted throttle can release them at once). ``throttles`` and the
per-kind buckets are queue-wide: one rate for all workers and partitions; they
share a slot (``{prefix}{throttles}``, or the prefix's own tag) because
take_token reads the rate in force beside the bucket.

``QUEUE_PREFIX`` (default empty) goes in front of every key, e.g.
``{jobs}:`` so that all keys of one queue share a Redis Cluster slot.

Partitions (``QUEUE_PARTITIONS`` = N > 1): partition p has its own ``jobs``
(and group), ``delayed``, ``jobs:dead`` (and group ``archive``),
``jobs:dead:evicted``, ``jobs:dead:log``, ``replay:<batch>``, tick locks ``sched:<name>:<tick>``,
``paused``, ``parked``, ``throttled``, ``fair:*`` and flow counters ``flow:...`` (each worker writes its counts to
one partition, opslib adds them up), named
``<prefix>{<tag>}:jobs`` and so on, where the hash tag ``p<p>-<k>`` is the
first (k = 0, 1, ...) whose slot falls in the p-th of N equal ranges of the
16384 slots: the ranges a cluster's primaries get when the slots are dealt out
evenly, so the partitions spread over the primaries. The keys of one
partition share a slot, so every script runs on one node; the prefix must
then hold no hash tag of its own (it would pull every partition into one
slot). ``<prefix>partitions`` records N, so that a worker with another count
is refused. With N = 1 every name is exactly as above.

==========================  ======  ======================  ===================
key (after QUEUE_PREFIX)    type    written by              read by
==========================  ======  ======================  ===================
``partitions``              string  the first worker (NX)   every worker, opslib
==========================  ======  ======================  ===================
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import cache

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

GROUP = "workers"
#: The archiver's consumer group on ``jobs:dead``: an entry it has acknowledged is in PostgreSQL.
ARCHIVE_GROUP = "archive"

#: How long ``replay:<batch>`` keeps a replay's jobs and their outcomes (replay script, worker).
REPLAY_OUTCOME_TTL_S = 86_400


@dataclass(frozen=True)
class Keys:
    """The key names of one queue (one partition of it when ``tag`` is set), for one prefix."""

    prefix: str = ""
    tag: str = ""
    """The partition's hash tag; "" for a queue of one partition (today's names)."""
    partition: int = 0
    queue: str = "default"
    """The named queue (:mod:`worker.store.queues`): ``default`` keeps the original names, another queue's
    keys are under ``q:<queue>:``."""

    @property
    def queue_prefix(self) -> str:
        """What the queue's keys start with before a partition's tag: the prefix, then ``q:<queue>:`` unless
        the queue is ``default``. The archive's ``queue`` column holds it, so that the dead letters of two
        named queues (whose ids may be equal) are rows of their own, and ``default``'s rows are as before."""
        return self.prefix if self.queue == "default" else f"{self.prefix}q:{self.queue}:"

    @property
    def base(self) -> str:
        """What the partition's keys start with: :attr:`queue_prefix`, then the partition's ``{tag}:``."""
        head = self.queue_prefix
        return f"{head}{{{self.tag}}}:" if self.tag else head

    @property
    def queues(self) -> str:
        """The named queues in use beside ``default`` (a set, queue-wide: workers and enqueue add to it)."""
        return f"{self.prefix}queues"

    @property
    def jobs(self) -> str:
        return f"{self.base}jobs"

    @property
    def delayed(self) -> str:
        return f"{self.base}delayed"

    @property
    def dead(self) -> str:
        return f"{self.base}jobs:dead"

    @property
    def dead_evicted(self) -> str:
        return f"{self.base}jobs:dead:evicted"

    @property
    def partitions(self) -> str:
        """The queue's recorded partition count (one key per queue, not per partition)."""
        return f"{self.prefix}partitions"

    @property
    def cancels(self) -> str:
        """The durable cancel marks of this partition's jobs (:mod:`worker.store.cancels`)."""
        return f"{self.base}cancels"

    @property
    def cancel_channel(self) -> str:
        """The pub/sub channel a cancel is announced on (queue-wide: PUBLISH reaches every node)."""
        return f"{self.prefix}cancel"

    @property
    def dead_log(self) -> str:
        return f"{self.base}jobs:dead:log"

    def sched(self, name: str, tick_epoch: int) -> str:
        return f"{self.base}sched:{name}:{tick_epoch}"

    @property
    def workers(self) -> str:
        """The live workers (one per queue, not per partition): member a worker, score its heartbeat's expiry."""
        return f"{self.prefix}workers"

    def replay(self, batch: str) -> str:
        return f"{self.base}replay:{batch}"

    @property
    def metrics_lock(self) -> str:
        return f"{self.prefix}metrics:lock"

    @property
    def paused(self) -> str:
        return f"{self.base}paused"

    @property
    def parked(self) -> str:
        return f"{self.base}parked"

    @property
    def throttled(self) -> str:
        return f"{self.base}throttled"

    @property
    def fair_queue(self) -> str:
        """Fair-key jobs waiting for their turn onto ``jobs`` (:mod:`worker.store.fair`)."""
        return f"{self.base}fair:queue"

    @property
    def fair_last(self) -> str:
        return f"{self.base}fair:last"

    @property
    def fair_clock(self) -> str:
        return f"{self.base}fair:clock"

    @property
    def fair_scripts(self) -> list[str]:
        """The KEYS of the fair scripts, in their order: ``jobs``, ``fair:queue``, ``fair:last``, ``fair:clock``."""
        return [self.jobs, self.fair_queue, self.fair_last, self.fair_clock]

    @property
    def _throttle_base(self) -> str:
        """``throttles`` and the buckets share a slot (the take_token script reads both): under the
        prefix's own hash tag, else under the tag ``{throttles}``."""
        return f"{self.prefix}throttles" if has_hash_tag(self.prefix) else f"{self.prefix}{{throttles}}"

    @property
    def throttles(self) -> str:
        return self._throttle_base

    def bucket(self, kind: str) -> str:
        return f"{self._throttle_base}:{kind}"

    def throttle_starts(self, kind: str) -> str:
        """The last second's starts of a throttled kind (take_token checks a late turn against them)."""
        return f"{self._throttle_base}:ran:{kind}"

    def declared(self, worker: str) -> str:
        """The kinds ``worker`` runs, with their policies (JSON, same expiry as its heartbeat)."""
        return f"{self.prefix}kinds:{worker}"

    @property
    def actions_log(self) -> str:
        return f"{self.prefix}actions:log"

    def flow(self, period_s: int, start_s: int, kind: str) -> str:
        """The counters of ``kind`` for the minute (``period_s`` 60) or hour (3600) starting at ``start_s``
        (epoch seconds); the fields are in :mod:`worker.store.flow`."""
        return f"{self.base}flow:{'m' if period_s == 60 else 'h'}:{start_s}:{kind}"

    def unique(self, kind: str, unique_key: str) -> str:
        """The lock of ``kind``'s job of ``unique_key`` (:mod:`worker.store.unique`)."""
        return f"{self.base}unique:{kind}:{unique_key}"

    def enqueued(self, job_id: str) -> str:
        """The mark of a producer's job id enqueued within the idempotency window (:mod:`worker.store.unique`)."""
        return f"{self.base}enqueued:{job_id}"

    @property
    def flow_kinds(self) -> str:
        """The kinds this partition holds flow counters of."""
        return f"{self.base}flow:kinds"


@cache
def partition_tag(partition: int, count: int) -> str:
    """The hash tag of ``partition`` of ``count``: ``p<p>-<k>`` with the first k whose slot falls
    in the partition's share of the slots (deterministic: every process computes the same)."""
    low = partition * REDIS_CLUSTER_HASH_SLOTS // count
    high = (partition + 1) * REDIS_CLUSTER_HASH_SLOTS // count
    for k in range(1_000_000):
        tag = f"p{partition}-{k}"
        if low <= key_slot(tag.encode()) < high:
            return tag
    raise AssertionError(f"no hash tag found for partition {partition} of {count}")


def has_hash_tag(prefix: str) -> bool:
    """True when ``prefix`` holds a non-empty ``{tag}`` (the part of a key that Redis Cluster hashes)."""
    start = prefix.find("{")
    end = prefix.find("}", start + 1)
    return start >= 0 and end > start + 1


def queue_partitions(prefix: str, count: int, queue: str = "default") -> list[Keys]:
    """The keys of each partition of ``queue`` with ``count`` partitions (one: today's names).

    Raises ValueError for a prefix with a hash tag of its own when ``count`` > 1.
    """
    if count == 1:
        return [Keys(prefix, queue=queue)]
    if has_hash_tag(prefix):
        raise ValueError(
            f"QUEUE_PREFIX={prefix!r} holds a hash tag, which would put all {count} partitions in one slot; "
            f"with QUEUE_PARTITIONS={count} drop the braces (e.g. {prefix.replace('{', '').replace('}', '')!r}): "
            "each partition brings a tag of its own"
        )
    return [Keys(prefix, partition_tag(p, count), p, queue) for p in range(count)]


def partition_of(job_id: str, count: int) -> int:
    """The partition a job belongs to: a stable hash of its job id (the same in every process)."""
    return zlib.crc32(job_id.encode()) % count if count > 1 else 0
