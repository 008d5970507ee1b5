"""The kinds this worker runs, published beside its heartbeat for ``opslib.kinds()`` and kind checks.

Every worker writes ``kinds:<worker>`` (:func:`worker.kinds.declaration`: each
kind with its retry policy, timeout and rate limit, and the schedules it
carries) with the heartbeat's interval and expiry. Readers take the
declarations of live workers only (those whose heartbeat exists), so a
stopped worker's kinds drop out with its heartbeat.
"""

from __future__ import annotations

from typing import Any

from worker.app import Chore
from worker.kinds import Registry, declaration
from worker.loop.upkeep import HEARTBEAT_INTERVAL_S, HEARTBEAT_TTL_S
from worker.store.keys import Keys


def declare_chore(redis_client: Any, keys: Keys, worker: str, registry: Registry) -> Chore:
    """The chore that keeps ``kinds:<worker>`` fresh."""
    declared = declaration(registry)

    async def declare() -> None:
        await redis_client.set(keys.declared(worker), declared, ex=HEARTBEAT_TTL_S)

    return Chore("declare-kinds", HEARTBEAT_INTERVAL_S, declare)
