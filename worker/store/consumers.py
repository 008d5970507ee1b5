"""Forgetting the consumers of dead workers, for group ``workers`` on ``jobs`` and group ``archive``
on ``jobs:dead`` alike.

A consumer is removed once its worker's heartbeat is gone, it owns no
pending entry and it has been idle a while. The heartbeat keys live in other
slots of a cluster than the stream, so they are read here, and the script
(``worker/store/lua/forget_consumers.lua``) checks the rest atomically on the
stream's node.
"""

from __future__ import annotations

from typing import Any

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
    pipe = redis.pipeline(transaction=False)
    for name in idle:
        pipe.exists(scripts.keys.heartbeat(name))
    gone = [name for name, beating in zip(idle, await pipe.execute(), strict=True) if not beating]
    if not gone:
        return []
    removed = await scripts.forget_consumers(min_idle_ms, gone, stream=stream, group=group)
    return [text(name) for name in removed]
