"""deploy/k8s/: `make k8s-check` passes offline and fails on a wrong field, and the manifests keep the
promises docs/operations.md ("On Kubernetes") makes: non-root, read-only, no capabilities, health probes,
a termination grace above SHUTDOWN_GRACE_S, secrets as files, one ScaledObject per queue on the backlog."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import ROOT

FOLDER = ROOT / "deploy" / "k8s"
spec = importlib.util.spec_from_file_location("k8s_check", ROOT / "scripts" / "k8s_check.py")
assert spec is not None and spec.loader is not None
k8s_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(k8s_check)


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
    assert out.count("ok   deploy/k8s/scaledobject-default.yaml: ScaledObject") == 1


def test_the_check_fails_on_a_misspelt_field(tmp_path: Path) -> None:
    worker = named("Deployment", "stagedoor-worker")
    worker["spec"]["template"]["spec"]["terminationGracePeriod"] = 45
    assert "terminationGracePeriod" in str(k8s_check.check_kubernetes(tmp_path, worker))
    scaled = yaml.safe_load((FOLDER / "scaledobject-default.yaml").read_text())
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


def test_the_workers_stop_within_their_grace_and_are_probed_by_health() -> None:
    pod = named("Deployment", "stagedoor-worker")["spec"]["template"]["spec"]
    (worker,) = pod["containers"]
    assert pod["terminationGracePeriodSeconds"] > float(env_of(worker)["SHUTDOWN_GRACE_S"])
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert worker[probe]["exec"]["command"] == ["python", "-m", "worker", "health"]
    assert {c["topologyKey"] for c in pod["topologySpreadConstraints"]} == {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    }
    metrics = named("Deployment", "stagedoor-metrics")["spec"]["template"]["spec"]["containers"][0]
    assert metrics["args"] == ["metrics"] and "WORKER_KINDS" not in env_of(metrics)


def test_one_scaledobject_per_queue_activates_on_one_job_and_scales_to_zero() -> None:
    scaled = [d for d in manifests() if d["kind"] == "ScaledObject"]
    assert [d["metadata"]["labels"]["stagedoor/queue"] for d in scaled] == ["default"]
    (default,) = scaled
    assert default["spec"]["scaleTargetRef"]["name"] == "stagedoor-worker"
    assert default["spec"]["minReplicaCount"] == 0
    (trigger,) = default["spec"]["triggers"]
    query = trigger["metadata"]["query"]
    served = 'queue=~"critical|default|bulk"'  # the queues the worker deployment serves (WORKER_QUEUES)
    assert f"stagedoor_backlog{{{served}}}" in query and f"stagedoor_running{{{served}}}" in query
    worker_env = next(
        d for d in manifests() if d["kind"] == "Deployment" and d["metadata"]["name"] == "stagedoor-worker"
    )
    containers = worker_env["spec"]["template"]["spec"]["containers"]
    assert {"name": "WORKER_QUEUES", "value": "critical:6,default:3,bulk:1"} in containers[0]["env"]
    assert "lag" not in query
    assert trigger["metadata"]["activationThreshold"] == "0"  # active above 0: one job
    assert trigger["metadata"]["ignoreNullValues"] == "false"  # nothing read is an error, never a 0


def test_the_keda_schema_is_the_one_the_script_writes() -> None:
    head = (FOLDER / "schemas" / "keda-scaledobject-v1alpha1.json").read_text()[:400]
    assert "cloudcoil-models-keda 2.16.1.0" in head and "scripts/keda_schema.py" in head
