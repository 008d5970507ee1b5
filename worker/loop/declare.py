"""The kinds this worker runs, published beside its heartbeat for ``opslib.kinds()`` and kind checks.

Every worker writes ``kinds:<worker>`` (:func:`worker.kinds.declaration`: each
kind with its retry policy, timeout and rate limit, the schedules it carries,
when each kind last succeeded in this worker, and the named queues it serves)
with the heartbeat's interval and expiry. Readers take the declarations of
live workers only (those whose heartbeat in ``workers`` is fresh), so a
stopped worker's kinds drop out with its heartbeat.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from worker.app import Chore
from worker.kinds import Registry, declaration
from worker.loop.observe import Tally
from worker.store.heartbeats import HEARTBEAT_INTERVAL_S, HEARTBEAT_TTL_S
from worker.store.keys import Keys


def declare_chore(
    redis_client: Any, keys: Keys, worker: str, registry: Registry, tally: Tally, queues: Sequence[str]
) -> Chore:
    """The chore that keeps ``kinds:<worker>`` fresh, with when each kind last succeeded here (``tally``) and
    the named queues this worker serves (``queues``)."""

    async def declare() -> None:
        declared = declaration(registry, tally.last_success, queues)
        await redis_client.set(keys.declared(worker), declared, ex=HEARTBEAT_TTL_S)

    return Chore("declare-kinds", HEARTBEAT_INTERVAL_S, declare)
