"""The catalogues a reader looks things up in are checked against their one declaration.

The settings tables are generated (:mod:`tests.docs.settings_tables`). Here:
the metrics table of ``docs/operations.md`` names exactly the series a
worker exports, each with its type and labels, read from a worker's own
registry (its collectors, the archive's and the queue-state gauges declared
by ``worker/observability/queue_state.py``), and which of them carry the
prefix rather than the named queue as their ``queue`` label; and the list of moves in
``docs/architecture.md`` names exactly the Lua scripts of ``worker/store/lua/``.
The descriptions stay the docs' own words.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter

import redis.asyncio as aioredis

from tests.helpers import ROOT
from worker.archive.archiver import ArchiveBacklog, Archiver
from worker.kinds import Registry
from worker.observability.backlog import PartitionBacklog
from worker.observability.metrics import Metrics
from worker.observability.queue_state import QueueState, stat_fields
from worker.schedules import schedule
from worker.settings import Settings
from worker.store.awaiting import Awaiting
from worker.store.vocabulary import OUTCOME_DEAD, OUTCOME_RETRIED

DOCS = ROOT / "docs"
NAMESPACE = "stagedoor"  # the table's names are Stagedoor's (METRICS_NAMESPACE of its image)
PREFIX = "{tenant}:"  # unlike any queue's name, so a series' ``queue`` label tells which of the two it is
QUEUE = "default"
TABLE_ROW = re.compile(r"^\| `(stagedoor_\w+)` \| (\w+) \| ([\w, ]+) \| .+ \|$", re.MULTILINE)


def documented_metrics() -> dict[str, tuple[str, tuple[str, ...]]]:
    """name -> (type, labels) of each row of the metrics table."""
    page = (DOCS / "operations.md").read_text()
    return {
        name: (kind, tuple(label.strip() for label in labels.split(",")))
        for name, kind, labels in TABLE_ROW.findall(page)
    }


def prefix_labelled() -> set[str]:
    """The series ``docs/operations.md`` says keep ``QUEUE_PREFIX`` as their ``queue`` label."""
    page = (DOCS / "operations.md").read_text()
    listed = re.search(r"keep `QUEUE_PREFIX` as their `queue` label:\s(.+?)\.\n", page, re.DOTALL)
    assert listed, "docs/operations.md has no sentence `... keep `QUEUE_PREFIX` as their `queue` label: `a`, ...`"
    return set(re.findall(r"`(stagedoor_\w+)`", listed[1]))


def exported_metrics() -> dict[str, tuple[str, tuple[str, ...] | None, set[str]]]:
    """name -> (type, labels, values of its ``queue`` label) of every series of a worker with the archive on,
    holding the metrics lock, with one schedule, after one job of each outcome, a hand-back and a scheduler
    tick of each kind (labels None: no sample to read them from). prometheus_client's own ``process_*``
    series are left out."""
    settings = Settings.from_env({"METRICS_NAMESPACE": NAMESPACE, "ARCHIVE_URL": "off", "QUEUE_PREFIX": PREFIX})
    client = aioredis.Redis()  # never connected: nothing here talks to Redis
    archiver = Archiver(client, settings, lambda: "")
    registry = Registry()
    schedule("nightly", "k", every_s=60, registry=registry)
    metrics = Metrics(settings, client, registry, archiver)
    metrics.queue_collector.states = {
        QUEUE: QueueState(**{stat.name: () if stat.metadata["combine"] == "consumers" else 0 for stat in stat_fields()})
    }
    metrics.backlog.readings = [PartitionBacklog(partition=0, undelivered=0, delayed_due=0, throttled=0, running=0)]
    metrics.awaiting.reading = Awaiting(Counter({("default", "k", "2"): 1}), queues=frozenset({"default"}))
    assert metrics.archive is not None
    metrics.archive.backlog = ArchiveBacklog(dead=0, log=0, oldest_s=0.0, dead_added=0)
    metrics.job_started("k", 0.1)
    metrics.jobs_succeeded(["k"], [0.1])
    metrics.job_finished("k", OUTCOME_RETRIED, 0.1, None)
    metrics.job_finished("k", OUTCOME_DEAD, 0.1, "exhausted")
    metrics.job_handed_back("k", waiting=True)
    metrics.tick_enqueued("s")
    metrics.tick_skipped("s")
    found: dict[str, tuple[str, tuple[str, ...] | None, set[str]]] = {}
    for family in metrics.registry.collect():
        if family.name.startswith("process_"):
            continue
        name = f"{family.name}_total" if family.type == "counter" else family.name
        labels = [tuple(n for n in sample.labels if n != "le") for sample in family.samples]
        queues = {sample.labels["queue"] for sample in family.samples if "queue" in sample.labels}
        found[name] = (family.type, labels[0] if labels else None, queues)
    asyncio.run(client.aclose())
    return found


def test_the_metrics_table_names_every_series_a_worker_exports() -> None:
    documented, exported = documented_metrics(), exported_metrics()
    missing = sorted(set(exported) - set(documented))
    assert not missing, (
        f"docs/operations.md's metrics table lacks {missing}: add a row `| `name` | type | labels | what |`"
    )
    gone = sorted(set(documented) - set(exported))
    assert not gone, f"docs/operations.md's metrics table names series no worker exports: {gone}"
    for name, (kind, labels, _) in exported.items():
        assert documented[name][0] == kind, f"docs/operations.md: {name} is a {kind}, not a {documented[name][0]}"
        if labels is not None:
            assert documented[name][1] == labels, f"docs/operations.md: {name}'s labels are {', '.join(labels)}"


def test_the_metrics_page_names_the_series_whose_queue_label_is_the_prefix() -> None:
    """The ``queue`` label is the named queue on the job and queue series, the prefix on worker-wide ones."""
    exported = exported_metrics()
    odd = {name: queues for name, (_, _, queues) in exported.items() if queues - {QUEUE, PREFIX}}
    assert not odd, f"these series' queue label is neither the named queue nor the prefix: {odd}"
    by_prefix = {name for name, (_, _, queues) in exported.items() if queues == {PREFIX}}
    by_queue = {name for name, (_, _, queues) in exported.items() if queues == {QUEUE}}
    documented = prefix_labelled()
    assert not by_prefix - documented, (
        f"docs/operations.md ('Who exports what') lacks {sorted(by_prefix - documented)} among the series "
        "that keep QUEUE_PREFIX as their queue label"
    )
    assert not documented & by_queue, (
        f"docs/operations.md says {sorted(documented & by_queue)} keep QUEUE_PREFIX, but their queue label is "
        "the named queue"
    )
    assert not documented - set(exported), f"docs/operations.md names series no worker exports: {documented}"


def test_the_store_contract_lists_every_lua_move() -> None:
    page = (DOCS / "architecture.md").read_text()
    listed = re.search(r"The moves[^:]*:\s(.+?)\.\n", page, re.DOTALL)
    assert listed, "docs/architecture.md's store contract has no sentence `The moves: `a`, `b`, ...`"
    named = re.findall(r"`(\w+)`", listed[1])
    scripts = sorted(path.stem for path in (ROOT / "worker" / "store" / "lua").glob("*.lua"))
    missing, gone = sorted(set(scripts) - set(named)), sorted(set(named) - set(scripts))
    assert not missing, f"docs/architecture.md's list of moves lacks {missing} (worker/store/lua/ has them)"
    assert not gone, f"docs/architecture.md's list of moves names {gone}, which worker/store/lua/ does not have"
