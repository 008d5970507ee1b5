"""deploy/k8s/: `make k8s-check` passes offline and fails on a wrong field, and the manifests keep the
promises docs/operations.md ("On Kubernetes") makes: non-root, read-only, no capabilities, health probes,
a termination grace above SHUTDOWN_GRACE_S, secrets as files, a worker Deployment and a ScaledObject per queue on
that queue's backlog, written from one template each (scripts/k8s_queues.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml

import stagedoor.queues as stagedoor_queues
from tests.helpers import ROOT

FOLDER = ROOT / "deploy" / "k8s"
spec = importlib.util.spec_from_file_location("k8s_check", ROOT / "scripts" / "k8s_check.py")
assert spec is not None and spec.loader is not None
k8s_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(k8s_check)
k8s_queues = k8s_check.k8s_queues
QUEUES = list(k8s_queues.QUEUES)


def manifests() -> list[dict[str, Any]]:
    return [d for p in sorted(FOLDER.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]


def named(kind: str, name: str) -> dict[str, Any]:
    return next(d for d in manifests() if d["kind"] == kind and d["metadata"].get("name") == name)


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def test_the_k8s_check_passes_offline(capsys: pytest.CaptureFixture[str]) -> None:
    assert k8s_check.main() == 0  # what `make k8s-check` runs
    out = capsys.readouterr().out
    assert "every manifest passed" in out
    for queue in QUEUES:
        assert out.count(f"ok   deploy/k8s/scaledobject-{queue}.yaml: ScaledObject") == 1
        assert out.count(f"ok   deploy/k8s/worker-{queue}.yaml: Deployment") == 1


def test_the_check_fails_on_a_per_queue_file_edited_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    files = k8s_queues.rendered()
    path = FOLDER / "scaledobject-bulk.yaml"
    edited = {**files, path: files[path].replace('threshold: "8"', 'threshold: "4"')}
    monkeypatch.setattr(k8s_queues, "rendered", lambda: edited)  # as if the file on disk were the edited one
    assert k8s_queues.stale() == ["scaledobject-bulk.yaml"]
    assert k8s_check.main() == 1


def test_the_check_fails_on_a_misspelt_field(tmp_path: Path) -> None:
    worker = named("Deployment", "stagedoor-worker-default")
    worker["spec"]["template"]["spec"]["terminationGracePeriod"] = 45
    assert "terminationGracePeriod" in str(k8s_check.check_kubernetes(tmp_path, worker))
    scaled = yaml.safe_load((FOLDER / "scaledobject-default.yaml").read_text())  # written from the template
    scaled["spec"]["minReplicas"] = 0  # KEDA's field is minReplicaCount
    bad = tmp_path / "scaledobject.yaml"
    bad.write_text(yaml.safe_dump(scaled))
    assert "minReplicas" in str(k8s_check.check_keda(bad))


def test_every_container_runs_locked_down_with_resources() -> None:
    for doc in manifests():
        if doc["kind"] not in ("Deployment", "Job"):
            continue
        pod = doc["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, doc["metadata"]["name"]
        assert pod["automountServiceAccountToken"] is False
        for container in pod["containers"] + pod.get("initContainers", []):
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, container["name"]
            assert context["allowPrivilegeEscalation"] is False, container["name"]
            assert context["capabilities"]["drop"] == ["ALL"], container["name"]
            assert {"requests", "limits"} <= set(container["resources"]), container["name"]
            secret_values = [v for k, v in env_of(container).items() if k.endswith(("_URL", "_PASSWORD"))]
            assert not secret_values, f"{container['name']}: a secret in the environment, not a *_FILE"


@pytest.mark.parametrize("queue", QUEUES)
def test_the_workers_stop_within_their_grace_and_are_probed_by_health(queue: str) -> None:
    pod = named("Deployment", f"stagedoor-worker-{queue}")["spec"]["template"]["spec"]
    (worker,) = pod["containers"]
    assert pod["terminationGracePeriodSeconds"] > float(env_of(worker)["SHUTDOWN_GRACE_S"])
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert worker[probe]["exec"]["command"] == ["python", "-m", "worker", "health"]
    assert {c["topologyKey"] for c in pod["topologySpreadConstraints"]} == {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    }
    for constraint in pod["topologySpreadConstraints"]:  # each queue's pods spread among themselves
        assert constraint["labelSelector"]["matchLabels"]["stagedoor/queue"] == queue
    metrics = named("Deployment", "stagedoor-metrics")["spec"]["template"]["spec"]["containers"][0]
    assert metrics["args"] == ["metrics"] and "WORKER_KINDS" not in env_of(metrics)


def test_each_queue_has_a_worker_deployment_serving_it_alone() -> None:
    workers = [
        d
        for d in manifests()
        if d["kind"] == "Deployment" and d["metadata"]["labels"].get("app.kubernetes.io/component") == "worker"
    ]
    assert sorted(d["metadata"]["name"] for d in workers) == sorted(f"stagedoor-worker-{q}" for q in QUEUES)
    selectors = set()
    for deployment in workers:
        queue = deployment["metadata"]["labels"]["stagedoor/queue"]
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert env_of(container)["WORKER_QUEUES"] == queue
        assert "replicas" not in deployment["spec"]  # KEDA's HPA owns the count
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert selector["stagedoor/queue"] == queue
        assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
        selectors.add(tuple(sorted(selector.items())))
    assert len(selectors) == len(QUEUES)  # no two Deployments select each other's pods


@pytest.mark.parametrize("queue", QUEUES)
def test_each_queue_s_scaledobject_scales_its_own_deployment_on_its_own_backlog(queue: str) -> None:
    scaled = named("ScaledObject", f"stagedoor-worker-{queue}")
    assert scaled["metadata"]["labels"]["stagedoor/queue"] == queue
    spec = scaled["spec"]
    assert spec["scaleTargetRef"]["name"] == f"stagedoor-worker-{queue}"
    assert spec["minReplicaCount"] == 0  # scales to zero
    assert spec["maxReplicaCount"] == k8s_queues.QUEUES[queue]
    (trigger,) = spec["triggers"]
    query = trigger["metadata"]["query"]
    assert query.count("{") == 2
    assert f'stagedoor_backlog{{queue="{queue}"}}' in query and f'stagedoor_running{{queue="{queue}"}}' in query
    assert "lag" not in query
    assert trigger["metadata"]["activationThreshold"] == "0"  # active above 0: one job
    assert trigger["metadata"]["ignoreNullValues"] == "false"  # nothing read is an error, never a 0
    (worker,) = named("Deployment", f"stagedoor-worker-{queue}")["spec"]["template"]["spec"]["containers"]
    assert trigger["metadata"]["threshold"] == env_of(worker)["WORKER_CONCURRENCY"]  # a replica's slots
    grace = named("Deployment", f"stagedoor-worker-{queue}")["spec"]["template"]["spec"]
    assert grace["terminationGracePeriodSeconds"] > float(env_of(worker)["SHUTDOWN_GRACE_S"])


def test_one_scaledobject_per_queue_and_the_endpoint_reports_each() -> None:
    scaled = sorted(d["metadata"]["labels"]["stagedoor/queue"] for d in manifests() if d["kind"] == "ScaledObject")
    assert scaled == sorted(QUEUES)
    targets = [d["spec"]["scaleTargetRef"]["name"] for d in manifests() if d["kind"] == "ScaledObject"]
    assert len(set(targets)) == len(targets)  # two ScaledObjects never target one Deployment
    (metrics,) = named("Deployment", "stagedoor-metrics")["spec"]["template"]["spec"]["containers"]
    assert sorted(env_of(metrics)["WORKER_QUEUES"].split(",")) == sorted(QUEUES)  # a 0 for each, never absent


def test_the_queues_are_stagedoor_s() -> None:
    assert sorted(QUEUES) == sorted(q.split(":")[0] for q in stagedoor_queues.WORKER_QUEUES.split(","))


def test_the_keda_schema_is_the_one_the_script_writes() -> None:
    head = (FOLDER / "schemas" / "keda-scaledobject-v1alpha1.json").read_text()[:400]
    assert "cloudcoil-models-keda 2.16.1.0" in head and "scripts/keda_schema.py" in head
