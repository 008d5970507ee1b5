"""Who is alive: one sorted set per queue, ``workers`` (member: a worker's name, score: when its
heartbeat expires, epoch seconds).

Finding heartbeats by SCAN walked the whole keyspace (a million unrelated
keys took ``health`` about a thousand round trips); one sorted set is read in
one command. Writers (the heartbeat chore) add their own member with a fresh
expiry and prune every member already expired in the same round trip; readers
(health, the metrics gauges, ``opslib.queue_stats``, forget-consumers) only
read, taking the members whose expiry is still ahead, so a read-only user can
ask. A worker that dies without its goodbye stays a member until it expires
(``HEARTBEAT_TTL_S``) and a writer prunes it.
"""

from __future__ import annotations

from typing import Any

from worker.store.keys import Keys
from worker.store.server_clock import CLOCK
from worker.store.wire import text

#: How often the heartbeat chore beats, and how long one beat keeps a worker live.
HEARTBEAT_INTERVAL_S = 5.0
HEARTBEAT_TTL_S = 15


def beat(pipe: Any, keys: Keys, worker: str, now: float | None = None) -> None:
    """Queue one beat of ``worker`` on a pipeline (sync or async): its expiry moved ahead, the expired pruned."""
    moment = CLOCK.now() if now is None else now
    pipe.zadd(keys.workers, {worker: moment + HEARTBEAT_TTL_S})
    pipe.zremrangebyscore(keys.workers, "-inf", f"({moment}")


def live_workers(client: Any, keys: Keys, now: float | None = None) -> set[str]:
    """The names of the workers whose heartbeat has not expired (one ZRANGE); a ``redis.Redis``."""
    moment = CLOCK.now() if now is None else now
    return {text(name) for name in client.zrangebyscore(keys.workers, f"({moment}", "+inf")}


async def live_workers_async(client: Any, keys: Keys, now: float | None = None) -> set[str]:
    """:func:`live_workers` for a ``redis.asyncio`` client."""
    moment = CLOCK.now() if now is None else now
    return {text(name) for name in await client.zrangebyscore(keys.workers, f"({moment}", "+inf")}
