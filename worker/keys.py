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
``workers:<name>``         string, EX  heartbeat chore       health, forget_consumers,
                                                             queue_state (metrics, opslib)
``replay:<batch>``         hash, EX    replay, worker        opslib.replay_status
``metrics:lock``           string, EX  metrics chore         metrics chore
=========================  ==========  ====================  ==========================

``QUEUE_PREFIX`` (default empty) goes in front of every key, e.g.
``{stagedoor}:`` so that all keys of one queue share a Redis Cluster slot.
"""

from __future__ import annotations

from dataclasses import dataclass

GROUP = "workers"
#: The archiver's consumer group on ``jobs:dead``: an entry it has acknowledged is in PostgreSQL.
ARCHIVE_GROUP = "archive"

#: How long ``replay:<batch>`` keeps a replay's jobs and their outcomes (replay script, worker).
REPLAY_OUTCOME_TTL_S = 86_400


@dataclass(frozen=True)
class Keys:
    """The key names of one queue, for one prefix."""

    prefix: str = ""

    @property
    def jobs(self) -> str:
        return f"{self.prefix}jobs"

    @property
    def delayed(self) -> str:
        return f"{self.prefix}delayed"

    @property
    def dead(self) -> str:
        return f"{self.prefix}jobs:dead"

    @property
    def dead_evicted(self) -> str:
        return f"{self.prefix}jobs:dead:evicted"

    @property
    def dead_log(self) -> str:
        return f"{self.prefix}jobs:dead:log"

    def sched(self, name: str, tick_epoch: int) -> str:
        return f"{self.prefix}sched:{name}:{tick_epoch}"

    @property
    def heartbeat_prefix(self) -> str:
        return f"{self.prefix}workers:"

    def heartbeat(self, worker: str) -> str:
        return f"{self.heartbeat_prefix}{worker}"

    def replay(self, batch: str) -> str:
        return f"{self.prefix}replay:{batch}"

    @property
    def metrics_lock(self) -> str:
        return f"{self.prefix}metrics:lock"
