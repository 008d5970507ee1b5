"""Cancels reaching a worker: pub/sub as the fast path, the durable marks at each claim refresh as the sure one.

``opslib.cancel`` writes a mark per job into its partition's ``cancels`` (the
cancel_entry script, :mod:`worker.store.cancels`) and then announces the job
ids on the queue's ``cancel`` channel. A worker hears the announcement within
milliseconds (:meth:`CancelWatch.listen`); a worker that was not listening
then (a dropped subscription, a reconnect, a failover) finds the mark when it
next refreshes its claims (:meth:`CancelWatch.check`, every third of
``RECLAIM_IDLE_MS``), and after every (re)subscription. Either way the
executor stops the job's running attempt (:meth:`Executor.cancel`) or, for an
entry it has read and not started, never starts it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions

from worker.loop.executor import Executor
from worker.loop.partition_reader import PartitionReader
from worker.loop.slots import Slots
from worker.store.cancels import cancel_note, read_marks

log = logging.getLogger("worker")

#: After a lost subscription, wait this long (doubling to :data:`MAX_BACKOFF_S`) before subscribing again.
BACKOFF_S = 0.1
MAX_BACKOFF_S = 5.0


class CancelWatch:
    """Hands the cancels meant for this worker's jobs to its executor."""

    def __init__(self, redis_client: Any, parts: Sequence[PartitionReader], slots: Slots, executor: Executor) -> None:
        self.redis = redis_client
        self.parts = parts
        self.slots = slots
        self.executor = executor
        self.channel = parts[0].keys.cancel_channel
        self._reconnected = False
        """redis-py made the subscription's connection again by itself (its retry): the marks are to be read."""

    async def listen(self) -> None:
        """Subscribe to the cancel channel and hand each announcement over, until cancelled; a lost
        subscription is made again (with backoff), and the marks are read after each (re)subscription."""
        backoff = BACKOFF_S
        client, own = subscriber(self.redis)
        try:
            while True:
                pubsub = client.pubsub()
                try:
                    await pubsub.subscribe(self.channel)
                    if pubsub.connection is not None:
                        pubsub.connection.register_connect_callback(self._connected_again)
                    await self.check()  # what was announced while this worker was not listening
                    backoff = BACKOFF_S
                    while True:
                        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                        if message is not None:
                            self.announced(message["data"])
                        if self._reconnected:  # subscribed again inside get_message: nothing was raised here
                            self._reconnected = False
                            await self.check()
                except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as exc:
                    log.warning("The cancel subscription was lost (%s); marks are read at each claim refresh.", exc)
                    await asyncio.sleep(backoff)
                    backoff = min(MAX_BACKOFF_S, backoff * 2)
                finally:
                    await pubsub.aclose()
        finally:
            if own:
                await client.aclose()

    def _connected_again(self, _connection: Any) -> None:
        """A connect callback of the subscription's connection (registered once it is connected, so called
        only when redis-py reconnects it on its own and subscribes again, raising nothing to :meth:`listen`):
        the marks are read after the message wait it happened in."""
        self._reconnected = True

    def announced(self, data: bytes | str) -> None:
        """One announcement (``{"job_ids": [...], "note": "by: reason"}``): stop those jobs here."""
        try:
            said = json.loads(data)
            ids, note = [str(i) for i in said["job_ids"]], str(said.get("note", ""))
        except (ValueError, KeyError, TypeError):
            log.warning("Ignored a message on %s that is not a cancel announcement.", self.channel)
            return
        self.executor.cancel(ids, note)

    async def check(self) -> None:
        """Read the marks of the jobs this worker runs or has read ahead (each partition's ``cancels``), and
        stop those marked."""
        ids: dict[int, list[str]] = {}
        for (index, _entry_id), attempt in list(self.executor.running.items()):
            ids.setdefault(index, []).append(attempt.job.job_id)
        for part, entry_id, raw, _at in list(self.slots.ahead):
            ids.setdefault(part.index, []).append((raw.get(b"job_id") or entry_id.encode()).decode())
        for part in self.parts:
            if part.index in ids:
                marks = await read_marks(self.redis, part.keys, ids[part.index])
                for job_id, mark in marks.items():
                    self.executor.cancel([job_id], cancel_note(mark))


def subscriber(client: Any) -> tuple[Any, bool]:
    """A client that can subscribe, and whether it is made here (to be closed): ``client`` itself on one
    server; on a cluster, a client of its default node (classic pub/sub messages reach every node)."""
    default_node = getattr(client, "get_default_node", None)
    if default_node is None:
        return client, False
    node = default_node()
    pool = aioredis.ConnectionPool(connection_class=node.connection_class, **node.connection_kwargs)
    return aioredis.Redis(connection_pool=pool), True
