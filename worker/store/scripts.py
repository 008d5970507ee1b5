"""The atomic moves between queue structures, one Lua file each (``worker/store/lua``).

Each file's header documents its KEYS, ARGV and return value. They are loaded
once per client with ``register_script`` (EVALSHA, reloaded on NOSCRIPT), and
this module builds their arguments, so the worker and opslib call the same
moves the same way: schedule_tick, promote, ack, retry, bury, replay, discard,
replay_archived, trim, trim_dead, refresh_claims, forget_consumers, run_now,
cancel_delayed, cancel_entry, trim_cancels, the incident desk's park, unpark and take_token,
hand_back (an entry of a payload version or kind this worker cannot run, back for one that can), and
the fair keys' fair_enqueue and fair_dispatch (:mod:`worker.store.fair`), enqueue_later
(:mod:`worker.store.ties`, beside enqueue_once of :mod:`worker.store.unique`), and give_back (entries this
worker will not run, idle for the reclaim loop).

Every script starts with ``#!lua``, so that the server refuses a key the
script did not declare, and every key it touches is passed in ``KEYS`` (none
is built inside a script); the keys of one call share a hash tag, so each
move runs whole on one Redis Cluster node (Redis >= 7.0 for the ``#!lua`` line).

Pieces two moves share live once, in ``lua/includes/`` (as BullMQ's
``includes/`` do): a line ``--- @include "name"`` is replaced by
``includes/name.lua`` when the source is loaded. ``owned`` is the fence of
every settle (ack, ack_unique, retry, bury, park, hand_back, a throttle's
deferral), of the claim refresh and of a give-back: the entry is still the settling
consumer's (a worker whose claim was taken over changes nothing;
``consumer=""`` settles whoever owns it). ``delayed_entry`` turns a
delayed member into XADD's fields (promote, run_now); ``group_frontier``
finds the oldest id a consumer group may still need (trim, trim_dead).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import redis.asyncio as aioredis
import redis.asyncio.cluster as aiocluster
import redis.cluster

from worker.store.durable import write_and_wait, write_and_wait_async
from worker.store.keys import ARCHIVE_GROUP, GROUP, REPLAY_OUTCOME_TTL_S, Keys
from worker.store.lua_source import source
from worker.store.trace_context import TRACE_LINK, TRACEPARENT
from worker.store.unique import held_lock
from worker.store.vocabulary import RECORDED_QUEUED
from worker.store.wire import encode_member

CLUSTER_PIPELINES = (redis.cluster.ClusterPipeline, aiocluster.ClusterPipeline)
#: The moves that record a job's outcome; with ``WAIT_REPLICAS`` they wait for the replicas.
OUTCOMES = frozenset({"retry", "bury"})

NAMES = (
    "schedule_tick",
    "promote",
    "ack",
    "retry",
    "bury",
    "replay",
    "discard",
    "replay_archived",
    "trim",
    "trim_dead",
    "refresh_claims",
    "forget_consumers",
    "run_now",
    "cancel_delayed",
    "cancel_entry",
    "trim_cancels",
    "park",
    "unpark",
    "take_token",
    "hand_back",
    "fair_enqueue",
    "fair_dispatch",
    "ack_unique",
    "give_back",
)


class Scripts:
    """The scripts registered on one client (sync or asyncio), with typed calls.

    Each method returns what the client's script call returns: a value for a
    plain client, an awaitable for an asyncio client. Pass ``client=`` a
    pipeline to queue the call in it. With ``wait_replicas`` > 0 the outcome
    moves (retry, bury) wait for that many replicas (:mod:`worker.store.durable`).
    """

    def __init__(self, redis: Any, keys: Keys, *, wait_replicas: int = 0) -> None:
        self.keys = keys
        self.redis = redis
        self.wait_replicas = wait_replicas
        self._asyncio = isinstance(redis, aioredis.Redis | aiocluster.RedisCluster)
        self._scripts = {name: redis.register_script(source(name)) for name in NAMES}

    def _call(self, name: str, keys: list[str], args: list[Any], client: Any = None) -> Any:
        script = self._scripts[name]
        if self.wait_replicas and client is None and name in OUTCOMES:
            command = ("EVAL", script.script, len(keys), *keys, *args)
            wait = write_and_wait_async if self._asyncio else write_and_wait
            return wait(self.redis, keys[0], command, self.wait_replicas)
        if isinstance(client, CLUSTER_PIPELINES):
            # redis-py blocks .evalsha() in a cluster pipeline and cannot load a script there:
            # the caller runs load() first, and the pipeline sends the EVALSHA as it is.
            return client.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        return script(keys=keys, args=args, client=client)

    def script(self, name: str) -> Any:
        """The registered script ``name`` (its ``sha`` and source), for a caller that packs EVALSHA itself."""
        return self._scripts[name]

    def load(self, client: Any) -> None:
        """Load every script on every primary of a (sync) cluster, before a pipeline calls them."""
        for script in self._scripts.values():
            client.script_load(script.script)

    def schedule_tick(
        self, name: str, tick_epoch: int, owner: str, ttl_s: int, fields: dict[str, str], client: Any = None
    ) -> Any:
        args: list[Any] = [owner, ttl_s]
        for field, value in fields.items():
            args += [field, value]
        return self._call("schedule_tick", [self.keys.sched(name, tick_epoch), self.keys.jobs], args, client)

    def promote(self, now: float | None, batch: int = 100, client: Any = None, *, throttled: bool = False) -> Any:
        """Move due members of ``delayed`` (``throttled=True``: of ``throttled``) onto ``jobs``; park paused kinds.
        Due at ``now``, or (None) at Redis's own time, read in the script."""
        source = self.keys.throttled if throttled else self.keys.delayed
        keys = [source, self.keys.jobs, self.keys.paused, self.keys.parked]
        return self._call("promote", keys, ["time" if now is None else repr(now), batch], client)

    def park(self, entry_id: str, kind: str, client: Any = None, *, consumer: str = "") -> Any:
        """``consumer``: the park lands only while the entry is still its own ("" = whoever owns it)."""
        keys = [self.keys.jobs, self.keys.paused, self.keys.parked]
        return self._call("park", keys, [GROUP, entry_id, kind, consumer], client)

    def hand_back(self, entry_id: str, consumer: str, run_at: float | None, fields: dict[str, str]) -> Any:
        """Give an entry back: onto ``jobs`` now (``run_at`` None) or into ``delayed`` until ``run_at``."""
        keys = [self.keys.jobs, self.keys.delayed]
        head = [GROUP, entry_id, consumer]
        if run_at is None:
            return self._call("hand_back", keys, [*head, "0", *(x for pair in fields.items() for x in pair)])
        return self._call("hand_back", keys, [*head, repr(run_at), encode_member(fields)])

    def fair_dispatch(self, target: int, batch: int, client: Any = None) -> Any:
        """Top ``jobs`` up to ``target`` undelivered entries from ``fair:queue``: ``[moved, spilled, waiting]``."""
        return self._call("fair_dispatch", self.keys.fair_scripts, [GROUP, target, batch], client)

    def unpark(self, kind: str, batch: int = 100, client: Any = None) -> Any:
        return self._call("unpark", [self.keys.parked, self.keys.jobs], [kind, batch], client)

    def defer(self, entry_id: str, run_at: float, member: str, client: Any = None, *, consumer: str = "") -> Any:
        """Move a throttled job refused a token to ``throttled`` until ``run_at`` (the retry script's move,
        attempts unchanged)."""
        return self._call(
            "retry", [self.keys.throttled, self.keys.jobs], [GROUP, entry_id, repr(run_at), member, consumer], client
        )

    def take_token(self, kind: str, default: float | None, ticket: str, hold_s: float) -> Any:
        """A throttled job's turn: ``[wait_s, ticket]`` (wait ``0``: start now), by Redis's clock; a turn
        within ``hold_s`` is the caller's to wait for."""
        keys = [self.keys.bucket(kind), self.keys.throttles, self.keys.throttle_starts(kind)]
        rate = "" if default is None else repr(default)
        return self._call("take_token", keys, [kind, rate, ticket, repr(hold_s)])

    def give_back(self, consumer: str, entry_ids: Iterable[str], idle_ms: int) -> Any:
        """Set the idle time of the ``entry_ids`` still ``consumer``'s to ``idle_ms`` (for the reclaim loop);
        returns how many were."""
        return self._call("give_back", [self.keys.jobs], [GROUP, consumer, idle_ms, *entry_ids])

    def ack(self, consumer: str, entry_ids: Iterable[str], client: Any = None) -> Any:
        """Acknowledge the ``entry_ids`` still ``consumer``'s; returns the stale ids, left alone."""
        return self._call("ack", [self.keys.jobs], [GROUP, consumer, *entry_ids], client)

    def ack_unique(self, consumer: str, entry_id: str, lock: str, job_id: str, client: Any = None) -> Any:
        """Acknowledge one success still ``consumer``'s and release the unique ``lock`` its job holds (1; 0:
        stale, nothing changed)."""
        return self._call("ack_unique", [self.keys.jobs, lock], [GROUP, consumer, entry_id, job_id], client)

    def retry(self, entry_id: str, run_at: float, member: str, client: Any = None, *, consumer: str = "") -> Any:
        """``consumer``: the retry lands only while the entry is still its own ("" = whoever owns it)."""
        return self._call(
            "retry",
            [self.keys.delayed, self.keys.jobs],
            [GROUP, entry_id, repr(run_at), member, consumer],
            client,
        )

    def bury(
        self,
        entry_id: str,
        fields: dict[str, str],
        *,
        maxlen: int,
        min_idle_ms: int = 0,
        keep_original: bool = True,
        consumer: str = "",
        client: Any = None,
        lock: str | None = None,
    ) -> Any:
        """``consumer``: bury only while the entry is still its own ("" = whoever owns it: the poison check);
        ``lock``: the job's unique lock, released with the burial."""
        args: list[Any] = [GROUP, entry_id, maxlen, min_idle_ms, int(keep_original), consumer]
        for name, value in fields.items():
            args += [name, value]
        keys = [self.keys.jobs, self.keys.dead, self.keys.dead_evicted, *([lock] if lock else [])]
        return self._call("bury", keys, args, client)

    def replay(
        self,
        dead_id: str,
        batch: str,
        drop: Iterable[str],
        *,
        at: str,
        record: bool,
        by: str = "",
        client: Any = None,
        context: Mapping[str, str] | None = None,
    ) -> Any:
        """``context``: fields that replace the entry's: the replay's trace fields (with which its
        ``trace_link`` goes) and a patch's (``opslib.replay(..., patch=)``)."""
        args: list[Any] = [dead_id, batch, REPLAY_OUTCOME_TTL_S, RECORDED_QUEUED, at, int(record), by, *drop]
        if context:
            args += [*([TRACE_LINK] if TRACEPARENT in context else []), "="]
            args += [x for pair in context.items() for x in pair]
        return self._call(
            "replay", [self.keys.dead, self.keys.jobs, self.keys.replay(batch), self.keys.dead_log], args, client
        )

    def discard(
        self, dead_id: str, batch: str, *, by: str, reason: str, at: str, record: bool, client: Any = None
    ) -> Any:
        return self._call(
            "discard", [self.keys.dead, self.keys.dead_log], [dead_id, batch, by, reason, at, int(record)], client
        )

    def replay_archived(
        self, dead_id: str, batch: str, job: Iterable[tuple[bytes, bytes]], *, at: str, client: Any = None
    ) -> Any:
        args: list[Any] = [dead_id, batch, REPLAY_OUTCOME_TTL_S, RECORDED_QUEUED, at]
        for name, value in job:
            args += [name, value]
        return self._call(
            "replay_archived", [self.keys.jobs, self.keys.replay(batch), self.keys.dead_log], args, client
        )

    def trim(self, client: Any = None) -> Any:
        return self._call("trim", [self.keys.jobs], [GROUP], client)

    def trim_dead(self, maxlen: int, step: int, client: Any = None) -> Any:
        return self._call("trim_dead", [self.keys.dead, self.keys.dead_evicted], [ARCHIVE_GROUP, maxlen, step], client)

    def refresh_claims(self, consumer: str, entry_ids: Iterable[str], client: Any = None) -> Any:
        return self._call("refresh_claims", [self.keys.jobs], [GROUP, consumer, *entry_ids], client)

    def forget_consumers(
        self,
        min_idle_ms: int,
        candidates: Iterable[str],
        *,
        stream: str | None = None,
        group: str = GROUP,
        client: Any = None,
    ) -> Any:
        """Remove the ``candidates`` (consumers whose heartbeat is gone) of ``group`` on ``stream`` that own
        nothing and are idle (default: group ``workers`` on ``jobs``)."""
        return self._call("forget_consumers", [stream or self.keys.jobs], [group, min_idle_ms, *candidates], client)

    def run_now(self, member: str | bytes, client: Any = None) -> Any:
        return self._call("run_now", [self.keys.delayed, self.keys.jobs], [member], client)

    def cancel_entry(
        self, entry_id: str, mark: str, *, dry_run: bool = False, client: Any = None, lock: str | None = None
    ) -> Any:
        """``lock``: the job's unique lock, released when the entry is removed before a worker read it."""
        keys = [self.keys.jobs, self.keys.cancels, *([lock] if lock else [])]
        return self._call("cancel_entry", keys, [entry_id, mark, int(dry_run)], client)

    def trim_cancels(self, cutoff: str, cursor: int | bytes | str, count: int = 100, client: Any = None) -> Any:
        """One step of the trim of ``cancels``: ``[next cursor, marks removed]`` (worker/store/lua/trim_cancels.lua)."""
        return self._call("trim_cancels", [self.keys.cancels, self.keys.jobs], [cutoff, cursor, count], client)

    def cancel_delayed(
        self,
        member: str | bytes,
        batch: str,
        *,
        by: str,
        reason: str,
        at: str,
        record: bool,
        source: str | None = None,
        client: Any = None,
    ) -> Any:
        """Take ``member`` out of ``delayed`` (or ``source``: ``throttled`` or ``parked``) and record it; the
        unique key its job holds, if any, is released with it (:func:`worker.store.unique.held_lock`)."""
        lock = held_lock(self.keys, member)
        keys = [source or self.keys.delayed, self.keys.dead_log, *lock[:1]]
        args = [member, batch, by, reason, at, int(record), *lock[1:]]
        return self._call("cancel_delayed", keys, args, client)
