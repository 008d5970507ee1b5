"""Forgetting the consumers of dead workers, for group ``workers`` on ``jobs`` and group ``archive``
on ``jobs:dead`` alike.

A consumer is removed once its worker's heartbeat is gone, it owns no
pending entry and it has been idle a while. The live workers' set may live in
another slot of a cluster than the stream, so it is read here, and the script
(``worker/store/lua/forget_consumers.lua``) checks the rest atomically on the
stream's node.
"""

from __future__ import annotations

from typing import Any

from worker.store.heartbeats import live_workers_async
from worker.store.scripts import Scripts
from worker.store.wire import text


async def forget_dead_consumers(
    redis: Any, scripts: Scripts, *, stream: str, group: str, min_idle_ms: int
) -> list[str]:
    """Remove the consumers of ``group`` on ``stream`` whose worker is gone; the names removed."""
    consumers = await redis.xinfo_consumers(stream, group)
    idle = [text(c["name"]) for c in consumers if int(c["pending"]) == 0]
    if not idle:
        return []
    live = await live_workers_async(redis, scripts.keys)
    gone = [name for name in idle if name not in live]
    if not gone:
        return []
    removed = await scripts.forget_consumers(min_idle_ms, gone, stream=stream, group=group)
    return [text(name) for name in removed]
