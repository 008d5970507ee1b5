"""The flow counters: per kind and minute, the jobs that succeeded, retried and died, and their wait and run
times, added up in Redis for ``opslib.throughput()`` (layout in :mod:`worker.store.flow`).

:class:`FlowCounter` is one of the loop's observers
(:class:`worker.observability.observer.Observer`). On the loop's path it only adds to
dictionaries in this process (a bucket index and an increment: well under a
microsecond a job, see ``benchmarks/hot_path.py --flow``); a chore hands
what it gathered to Redis about once a second, in one pipeline of HINCRBYs
(:meth:`FlowCounter.flush`), into the minute's and the hour's hash of each
kind. A flush that fails keeps its counts for the next one; the last flush
runs when the worker stops.

Counts are given to the minute in which the flush's interval (about a
second) falls, so a job finished in the last second of a minute may count in
the next. Each job counts in its own named queue's keys (the loop reports
the queue with the job). On a queue of several partitions each worker writes
to one partition, chosen by its name, so that workers spread over a cluster's
primaries; readers add the partitions up.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from bisect import bisect_left
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import redis.exceptions

from worker.app import Chore
from worker.observability.observer import Observer
from worker.store.flow import (
    BOUNDS_S,
    BUCKETS,
    COUNTS,
    DEAD,
    EXPIRY_MARGIN_S,
    HOUR_S,
    MINUTE_S,
    MINUTES_KEPT_S,
    RETRIED,
    RUN,
    SUCCEEDED,
    UNDECLARED,
    WAIT,
    bucket_field,
)
from worker.store.keys import Keys, partition_of
from worker.store.partitions import partition_keys
from worker.store.queues import DEFAULT_QUEUE
from worker.store.reconnect import lost_connection
from worker.store.refusals import describe_refusal
from worker.store.vocabulary import OUTCOME_DEAD, OUTCOME_RETRIED, OUTCOME_SUCCEEDED, REASONS_AFTER_A_RUN

if TYPE_CHECKING:
    from worker.app import WorkerApp
    from worker.kinds import Registry

log = logging.getLogger("worker.observability.flow")

FLUSH_INTERVAL_S = 1.0
#: A kind's row of :attr:`FlowCounter.runs`: the run-time buckets, then one count per outcome (in ``COUNTS``' order).
_SUCCEEDED, _RETRIED, _DEAD = (BUCKETS + COUNTS.index(name) for name in (SUCCEEDED, RETRIED, DEAD))
_ROW = BUCKETS + len(COUNTS)


class FlowCounter(Observer):
    """Counts what the loop reports, per queue and kind, until :meth:`flush` adds it to Redis (to that queue's
    flow keys, in the partition of ``keys``)."""

    def __init__(self, client: Any, keys: Keys, kinds: Iterable[str], retention_days: int) -> None:
        self.redis = client
        self.keys = keys
        self.kinds = frozenset(kinds)
        """The declared kinds: a dead job naming another is counted as :data:`UNDECLARED`."""
        self.retention_s = retention_days * 86_400
        self.waits: dict[str, dict[str, list[int]]] = {}
        """Per queue and kind: jobs started per wait bucket."""
        self.runs: dict[str, dict[str, list[int]]] = {}
        """Per queue and kind: attempts per run-time bucket, then the succeeded, retried and dead counts
        (:data:`_ROW`)."""
        self.since = time.time()

    # ------------------------------------------------------------ observer

    def job_started(self, kind: str, wait_s: float, queue: str = DEFAULT_QUEUE) -> None:
        """A job is about to run: count its wait in its bucket."""
        per_kind = self.waits.get(queue)
        if per_kind is None:
            per_kind = self.waits[queue] = {}
        waits = per_kind.get(kind)
        if waits is None:
            waits = per_kind[kind] = [0] * BUCKETS
        waits[bisect_left(BOUNDS_S, wait_s)] += 1

    def job_finished(
        self, kind: str, outcome: str, duration_s: float, reason: str | None, queue: str = DEFAULT_QUEUE
    ) -> None:
        """A job finished: count its outcome and, when its handler ran, its run time."""
        if outcome == OUTCOME_SUCCEEDED:
            self.jobs_succeeded((kind,), (duration_s,), queue)
            return
        if outcome == OUTCOME_DEAD and kind not in self.kinds:
            kind = UNDECLARED
        per_kind = self.runs.setdefault(queue, {})
        row = per_kind.get(kind)
        if row is None:
            row = per_kind[kind] = [0] * _ROW
        if outcome == OUTCOME_RETRIED:
            row[_RETRIED] += 1
        else:
            row[_DEAD] += 1
            if reason not in REASONS_AFTER_A_RUN:
                return  # never ran: malformed, unknown kind, or poison found by reclaim
        row[bisect_left(BOUNDS_S, duration_s)] += 1

    def jobs_succeeded(self, kinds: Sequence[str], durations_s: Sequence[float], queue: str = DEFAULT_QUEUE) -> None:
        """Jobs succeeded: count each and its run time."""
        runs = self.runs.get(queue)
        if runs is None:
            runs = self.runs[queue] = {}
        for kind, duration_s in zip(kinds, durations_s, strict=True):
            row = runs.get(kind)
            if row is None:
                row = runs[kind] = [0] * _ROW
            row[_SUCCEEDED] += 1
            row[bisect_left(BOUNDS_S, duration_s)] += 1

    # --------------------------------------------------------------- flush

    def take(self) -> tuple[dict[tuple[str, str], dict[str, int]], float]:
        """What was counted since the last take, as non-zero fields per ``(queue, kind)``, and the middle of its
        interval."""
        waits, runs = self.waits, self.runs
        self.waits, self.runs = {}, {}
        now = time.time()
        middle, self.since = (self.since + now) / 2, now
        fields: dict[tuple[str, str], dict[str, int]] = {}
        for measure, per_queue in ((WAIT, waits), (RUN, runs)):
            for queue, per_kind in per_queue.items():
                for kind, row in per_kind.items():
                    kind_fields = fields.setdefault((queue, kind), {})
                    for index, n in enumerate(row[:BUCKETS]):
                        if n:
                            kind_fields[bucket_field(measure, index)] = n
                    for name, n in zip(COUNTS, row[BUCKETS:], strict=False):
                        if n:
                            kind_fields[name] = n
        return fields, middle

    def give_back(self, fields: dict[tuple[str, str], dict[str, int]]) -> None:
        """Put counts a flush could not write back into the next one's (their minute becomes the next's)."""
        for (queue, kind), kind_fields in fields.items():
            for name, n in kind_fields.items():
                measure, _, index = name.partition(":")
                if measure == WAIT:
                    self.waits.setdefault(queue, {}).setdefault(kind, [0] * BUCKETS)[int(index)] += n
                else:
                    slot = int(index) if measure == RUN else BUCKETS + COUNTS.index(name)
                    self.runs.setdefault(queue, {}).setdefault(kind, [0] * _ROW)[slot] += n

    async def flush(self) -> None:
        """Add what was counted to each queue's and kind's minute and hour hashes, in one pipeline."""
        fields, at_s = self.take()
        if not fields:
            return
        minute = int(at_s) // MINUTE_S * MINUTE_S
        hour = int(at_s) // HOUR_S * HOUR_S
        pipe = self.redis.pipeline(transaction=False)
        for (queue, kind), kind_fields in fields.items():
            keys = dataclasses.replace(self.keys, queue=queue)
            for period_s, start_s, kept_s in (
                (MINUTE_S, minute, min(MINUTES_KEPT_S, self.retention_s)),
                (HOUR_S, hour, self.retention_s),
            ):
                key = keys.flow(period_s, start_s, kind)
                for name, n in kind_fields.items():
                    pipe.hincrby(key, name, n)
                pipe.expireat(key, start_s + period_s + kept_s + EXPIRY_MARGIN_S)
        for queue in {queue for queue, _ in fields}:
            kinds_key = dataclasses.replace(self.keys, queue=queue).flow_kinds
            pipe.sadd(kinds_key, *{kind for q, kind in fields if q == queue})
            pipe.expire(kinds_key, self.retention_s + EXPIRY_MARGIN_S)
        try:
            await pipe.execute()
        except BaseException:
            self.give_back(fields)
            raise

    def chore(self) -> Chore:
        return Chore("flow", FLUSH_INTERVAL_S, self.flush)


@contextlib.asynccontextmanager
async def worker_flow(app: WorkerApp, registry: Registry) -> AsyncIterator[list[FlowCounter]]:
    """Count the flow of ``registry``'s kinds while the worker runs (none with ``FLOW_RETENTION=0``); yield the
    observers to pass to the loop. The last counts are flushed on the way out."""
    settings = app.settings
    if not settings.flow_retention_days:
        yield []
        return
    parts = partition_keys(settings)
    keys = parts[partition_of(settings.worker_name, len(parts))]
    counter = FlowCounter(app.redis, keys, registry.kinds, settings.flow_retention_days)
    app.add_chore(counter.chore())
    try:
        yield [counter]
    finally:
        try:
            await counter.flush()
        except Exception as exc:
            if not (lost_connection(exc) or isinstance(exc, redis.exceptions.RedisError)):  # away, or refusing (OOM...)
                raise
            log.warning(
                "Worker %s could not write its last flow counts: %s.", settings.worker_name, describe_refusal(exc)
            )
