"""Dead letters for the opslib tests: from real worker runs, or buried directly by the bury script,
exactly as the worker buries them (thousands at once: ``benchmarks.fixtures.buried_many``)."""

from __future__ import annotations

import redis

from benchmarks.fixtures import ensure_group
from tests.helpers import Workers
from worker.store.enqueue import enqueue
from worker.store.keys import GROUP, Keys
from worker.store.scripts import Scripts

KINDS = "tests.opslib.kinds_opslib"
BAD_LABELS = ("14-C", "7-A", "3-B")


def seat_dead_letters(r: redis.Redis, keys: Keys, workers: Workers, labels: tuple[str, ...] = BAD_LABELS) -> list[str]:
    """Run ``seat_label`` jobs with these labels through a burst worker; return the dead ids."""
    for number, label in enumerate(labels):
        enqueue(r, "seat_label", {"seat": label, "order_id": str(4471 + number)}, prefix=keys.prefix)
    workers.burst(KINDS)
    return [entry_id.decode() for entry_id, _ in r.xrange(keys.dead)]


def bury(r: redis.Redis, keys: Keys, fields: dict[str, str], error: dict[str, str]) -> str:
    """Put one job straight into ``jobs:dead`` through the bury script; return its dead id."""
    ensure_group(r, keys)
    entry_id = r.xadd(keys.jobs, fields).decode()
    r.xreadgroup(GROUP, "seeder", {keys.jobs: ">"}, count=1)
    return Scripts(r, keys).bury(entry_id, error, maxlen=100_000).decode()
