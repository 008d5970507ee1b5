"""One partition of the queue as the read loop sees it: where its reads go and who records its outcomes.

Each partition has its own ``jobs`` stream, so its own reads, its own
acknowledgements (XACK names one stream) and its own moves (the scripts are
bound to its keys). A :class:`PartitionReader` holds them together: the
partition's :class:`~worker.loop.outcomes.Outcomes` (its scripts and keys, the
acknowledgements gathered for it) and a connection to the node that owns its
stream, on which the loop writes the gathered XACK and the next XREADGROUP in
one round trip. With one partition the worker has one reader and its loop is
one read loop (:mod:`worker.loop.rotation`) serves one partition or turns over
several.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

import redis.exceptions

from worker.loop.fair_feeder import FairFeeder
from worker.loop.node_connection import REDIRECTIONS, NodeConnection
from worker.loop.outcomes import Outcomes
from worker.loop.resp import pairs, resp_command
from worker.loop.slots import Entries
from worker.store.keys import GROUP
from worker.store.reconnect import CONNECTION_ERRORS, lost_connection

log = logging.getLogger("worker")

#: What a read may raise that the loop rides out: a lost connection, a moved slot, a lost group.
READ_ERRORS: tuple[type[BaseException], ...] = (*CONNECTION_ERRORS, *REDIRECTIONS, redis.exceptions.ResponseError)


def read_error(exc: BaseException) -> bool:
    """True for an error of a read that the loop rides out: :data:`READ_ERRORS`, or any other lost
    connection (:func:`~worker.store.reconnect.lost_connection`: uvloop's closed transport after a reset)."""
    return isinstance(exc, READ_ERRORS) or lost_connection(exc)


class PartitionReader:
    """The reads, acknowledgements and outcomes of one partition for one consumer."""

    def __init__(
        self, redis_client: Any, outcomes: Outcomes, consumer: str, block_ms: int, index: int | None = None
    ) -> None:
        self.outcomes = outcomes
        self.succeeded = outcomes.succeeded  # bound once: called for every job
        self.scripts = outcomes.scripts
        self.keys = outcomes.keys
        self.queue_name = self.keys.queue
        self.index = self.keys.partition if index is None else index
        """This reader's number among the worker's (partition ids repeat across queues; slots are keyed by it)."""
        self.stream = self.keys.jobs
        self.node = NodeConnection(redis_client, self.keys.jobs)
        self.consumer = consumer
        self.block_ms = block_ms
        self.waiting: asyncio.Task[Entries] | None = None
        """The one-entry blocking read this partition waits in since a read found it empty (with several
        partitions), or its rest after a failed read; it holds one of the worker's slots meanwhile."""
        self.failures = 0
        """Reads of this partition failed in a row (its node away); it rests with backoff meanwhile."""
        self.read_after = 0.0
        """Monotonic time before which this consumer reads nothing new: it handed back a copy that had
        come round it already (:mod:`worker.loop.handback`), so that a worker able to run it reads it."""
        self._ack = self.scripts.script("ack")
        self._ack_head = ("EVALSHA", self._ack.sha, "1", self.keys.jobs, GROUP, consumer)
        self._commands: dict[tuple[int, bool], bytes] = {}
        self.fair: FairFeeder | None = None
        """The partition's fair feeder, told of every read that returned entries (:mod:`worker.loop.fair_feeder`)."""

    @property
    def where(self) -> str:
        """``host:port`` of the node serving this partition on a cluster, "" on a single server."""
        return self.node.where

    async def read(self, count: int, block: bool = True) -> Entries:
        """Acknowledge this partition's finished entries and read up to ``count`` new ones, in one round
        trip; ``block``: wait up to the block time for an entry, else return at once.

        The loop writes the fenced acknowledgement (``ack.lua``: only the
        entries still this consumer's) and XREADGROUP to one connection
        together (a pipeline without redis-py's per-call pipeline object, which
        costs more than the round trip at this rate). Replay outcomes, rare,
        are flushed separately first. A server without the script (the first
        read, a restart, SCRIPT FLUSH) gets it loaded on the same connection,
        and the acknowledgement sent again. After a hand-back of a copy that
        had come round already, the read waits until :attr:`read_after`.
        """
        outcomes = self.outcomes
        rest = self.read_after - time.monotonic()
        if rest > 0:
            await asyncio.sleep(rest)
        if outcomes.replay_outcomes or outcomes.releases:
            await outcomes.flush()
        acks = outcomes.take_acks()
        conn = await self.node.get()
        stale: Any = ()
        try:
            read = self._read_command(count, block)
            if acks:
                await conn.send_packed_command(resp_command(self._ack_head, *acks) + read, check_health=False)
                stale = await self._ack_reply(conn)
            else:
                await conn.send_packed_command(read, check_health=False)
            reply = await conn.read_response()  # within REDIS_SOCKET_TIMEOUT_S (above BLOCK_MS), or lost
            if stale is None:  # the server lost the script: load it and acknowledge again (rare)
                await conn.send_command("SCRIPT", "LOAD", self._ack.script, check_health=False)
                await conn.read_response()
                await conn.send_packed_command(resp_command(self._ack_head, *acks), check_health=False)
                stale = await conn.read_response()
        except BaseException as exc:
            outcomes.give_back_acks(acks)
            await self.node.lost(exc)
            raise
        if stale:
            outcomes.stale.dropped("ack", [eid.decode() for eid in stale])
        if not reply:
            return []
        entries = next(iter(reply.values())) if isinstance(reply, dict) else reply[0][1]
        found = [(eid.decode(), pairs(flat)) for eid, flat in entries]
        if self.fair is not None:
            self.fair.note(found)
        return found

    @staticmethod
    async def _ack_reply(conn: Any) -> list[bytes] | None:
        """The fenced acknowledgement's reply: the stale ids, or None when the server lacks the script (the
        read's reply follows all the same)."""
        try:
            stale: list[bytes] = await conn.read_response()
        except redis.exceptions.NoScriptError:
            return None
        return stale

    async def give_back(self, entry_ids: list[str], idle_ms: int | None = None) -> None:
        """Entries this worker will not start (or run no more): their idle time set to
        RECLAIM_IDLE_MS (``give_back.lua``: XCLAIM ... IDLE ... JUSTID, which leaves the delivery count alone),
        so that another worker's reclaim takes them at once instead of after RECLAIM_IDLE_MS (``idle_ms``:
        another idle time, for a later reclaim). Fenced as the settles are: an entry another worker took over
        meanwhile stays that worker's."""
        if not entry_ids:
            return
        ids = list(entry_ids)
        if idle_ms is None:
            idle_ms = self.outcomes.settings.reclaim_idle_ms
        try:
            await self.scripts.give_back(self.consumer, ids, idle_ms)
        except Exception as exc:  # away, or refusing writes
            if not (lost_connection(exc) or isinstance(exc, redis.exceptions.RedisError)):
                raise
            log.warning("Could not give back %d entries of %s; they are reclaimed once idle.", len(ids), self.stream)

    def _read_command(self, count: int, block: bool) -> bytes:
        """The packed XREADGROUP for ``count`` entries (cached: it is sent thousands of times a second)."""
        packed = self._commands.get((count, block))
        if packed is None:
            head: tuple[str, ...] = ("XREADGROUP", "GROUP", GROUP, self.consumer, "COUNT", str(count))
            if block:
                head += ("BLOCK", str(self.block_ms))
            packed = resp_command(head, "STREAMS", self.keys.jobs, ">")
            self._commands[(count, block)] = packed
        return packed


async def give_back(
    parts: Sequence[PartitionReader],
    left: Sequence[tuple[Any, str, Any, float]],
    why: str = "did not start within SHUTDOWN_GRACE_S",
) -> None:
    """Give back entries read ahead that this worker will not start (:meth:`PartitionReader.give_back`): it is
    stopping, or every slot is held by a handler that should have stopped; said in one line."""
    if not left:
        return
    log.warning("%d entries read ahead %s; giving them back.", len(left), why)
    for part in parts:
        await part.give_back([entry_id for owner, entry_id, _raw, _at in left if owner is part])
