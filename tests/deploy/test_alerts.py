"""The Prometheus rules in deploy/alerts.yml: valid (``promtool check rules``) and unit-tested
(``promtool test rules deploy/alerts.test.yml``), and every metric they read is one the worker exports."""

from __future__ import annotations

import re
import subprocess
from collections import Counter

import pytest
import redis.asyncio as aioredis
import yaml

from tests.deploy.helpers import require
from tests.helpers import ROOT
from worker.archive.archiver import ArchiveBacklog, Archiver
from worker.errors import SettingsError
from worker.kinds import Registry
from worker.observability.metrics import Metrics
from worker.observability.queue_state import Consumer, QueueState
from worker.settings import Settings
from worker.store.awaiting import Awaiting

DEPLOY = ROOT / "deploy"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=DEPLOY, capture_output=True, text=True, timeout=60)


def test_the_rules_are_valid() -> None:
    done = run(str(require("promtool")), "check", "rules", "alerts.yml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_each_alert_passes_its_unit_tests() -> None:
    done = run(str(require("promtool")), "test", "rules", "alerts.test.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    alerts = {
        rule["alert"]
        for group in yaml.safe_load((DEPLOY / "alerts.yml").read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    tested = set(re.findall(r"alertname: (\S+)", (DEPLOY / "alerts.test.yml").read_text()))
    assert alerts == tested, f"alerts without a unit test: {alerts - tested}; tests of no alert: {tested - alerts}"


def exported_metric_names(namespace: str = "stagedoor") -> set[str]:
    """Every series name a worker's registry can export (with the queue-wide gauges filled in); the rules
    read the names the image and ``make run`` export (``METRICS_NAMESPACE=stagedoor``)."""
    settings = Settings.from_env({"METRICS_NAMESPACE": namespace} if namespace else {})
    client = aioredis.Redis()
    metrics = Metrics(settings, client, Registry(), Archiver(client, settings, ""))
    metrics.queue_collector.states = {
        "default": QueueState(
            *range(9),
            consumers=(Consumer("w1", 0, 0, live=True),),
            consumers_live=1,
            paused_kinds=1,
            oldest_pause_s=2.0,
            parked=3,
            throttled=4,
            fair=0,
        )
    }
    metrics.awaiting.reading = Awaiting(Counter({("default", "k", "2"): 1}), queues=frozenset({"default"}))
    assert metrics.archive is not None
    metrics.archive.backlog = ArchiveBacklog(dead=1, log=2, oldest_s=3.0, dead_added=4)
    names = set()
    for family in metrics.registry.collect():
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}.get(family.type, ("",))
        names |= {family.name + suffix for suffix in suffixes}
    return names


def test_the_rules_read_only_metrics_the_worker_exports() -> None:
    rules = [rule for group in yaml.safe_load((DEPLOY / "alerts.yml").read_text())["groups"] for rule in group["rules"]]
    used = {name for rule in rules for name in re.findall(r"(?<![:\w])stagedoor_\w+(?![:\w])", rule["expr"])}
    missing = used - exported_metric_names()
    assert used and not missing, f"rules read metrics the worker does not export: {missing}"


def test_each_alert_leads_to_a_runbook_that_exists_and_a_command_to_run() -> None:
    alerts = [
        rule for group in yaml.safe_load((DEPLOY / "alerts.yml").read_text())["groups"] for rule in group["rules"]
    ]
    for rule in (rule for rule in alerts if "alert" in rule):
        annotations = rule["annotations"]
        assert (ROOT / annotations.get("runbook_url", "-")).is_file(), f"{rule['alert']}: runbook_url is not a file"
        assert "`python -m opslib " in annotations["description"], f"{rule['alert']}: no command to run"
        if "kind" in rule["expr"] or "$labels.kind" in annotations["summary"]:
            assert "runbook {{ $labels.kind }}" in annotations["description"], f"{rule['alert']}: kind not named"


def test_every_series_but_the_process_ones_is_named_by_the_namespace() -> None:
    defaults = exported_metric_names("")
    assert {name for name in defaults if not name.startswith("process_")} == {
        "worker_" + name.removeprefix("stagedoor_") for name in exported_metric_names() if name.startswith("stagedoor_")
    }
    assert all(name.startswith(("worker_", "process_")) for name in defaults)
    with pytest.raises(SettingsError, match="METRICS_NAMESPACE='my-app' is not a metric name"):
        Settings.from_env({"METRICS_NAMESPACE": "my-app"})
