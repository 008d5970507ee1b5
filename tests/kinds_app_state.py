"""What test kinds need of the worker they run in: its Redis client and queue prefix, kept by a lifespan.

A test kinds module imports :data:`state` from here; the import declares the
lifespan (once, whichever modules share it), which fills ``state`` before the
first job runs, so handlers write their records next to the queue, under its prefix.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from worker import lifespan
from worker.app import WorkerApp

state: dict[str, object] = {}


@lifespan()
async def remember(app: WorkerApp) -> AsyncIterator[None]:
    state["redis"] = app.redis
    state["prefix"] = app.settings.prefix
    yield


def key(name: str) -> str:
    """The test's key ``name`` under the worker's queue prefix (``<prefix>test:<name>``)."""
    return f"{state['prefix']}test:{name}"
