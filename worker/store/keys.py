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
=========================  ==========  ====================  ==========================

``QUEUE_PREFIX`` (default empty) goes in front of every key, e.g.
``{jobs}:`` so that all keys of one queue share a Redis Cluster slot.

Partitions (``QUEUE_PARTITIONS`` = N > 1): partition p has its own ``jobs``
(and group), ``delayed``, ``jobs:dead`` (and group ``archive``),
``jobs:dead:evicted``, ``jobs:dead:log``, ``replay:<batch>``, tick locks ``sched:<name>:<tick>`` and
flow counters ``flow:...`` (each worker writes its counts to one partition, opslib adds them up), named
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

    @property
    def base(self) -> str:
        """What the partition's keys start with: the prefix, then the partition's ``{tag}:``."""
        return f"{self.prefix}{{{self.tag}}}:" if self.tag else self.prefix

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

    def flow(self, period_s: int, start_s: int, kind: str) -> str:
        """The counters of ``kind`` for the minute (``period_s`` 60) or hour (3600) starting at ``start_s``
        (epoch seconds); the fields are in :mod:`worker.store.flow`."""
        return f"{self.base}flow:{'m' if period_s == 60 else 'h'}:{start_s}:{kind}"

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


def queue_partitions(prefix: str, count: int) -> list[Keys]:
    """The keys of each partition of a queue of ``count`` partitions (one: today's names).

    Raises ValueError for a prefix with a hash tag of its own when ``count`` > 1.
    """
    if count == 1:
        return [Keys(prefix)]
    if has_hash_tag(prefix):
        raise ValueError(
            f"QUEUE_PREFIX={prefix!r} holds a hash tag, which would put all {count} partitions in one slot; "
            f"with QUEUE_PARTITIONS={count} drop the braces (e.g. {prefix.replace('{', '').replace('}', '')!r}): "
            "each partition brings a tag of its own"
        )
    return [Keys(prefix, partition_tag(p, count), p) for p in range(count)]


def partition_of(job_id: str, count: int) -> int:
    """The partition a job belongs to: a stable hash of its job id (the same in every process)."""
    return zlib.crc32(job_id.encode()) % count if count > 1 else 0
