"""`make k8s-check`: every manifest of deploy/k8s/ validated offline, none skipped.

Kubernetes' own kinds against the schemas the PyPI package kubernetes-validate ships (strict: a field the
API does not know is an error), each ScaledObject by check-jsonschema against KEDA's CRD schema kept in
deploy/k8s/schemas/ (scripts/keda_schema.py), and the kustomization against the folder: every file it
lists exists, and every manifest but the Secrets' example is listed; and the per-queue files are what
scripts/k8s_queues.py writes from deploy/k8s/templates/ (none edited by hand, none stale). Prints one line per document;
exits 1 on the first folder's worth of failures, each said in one line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import k8s_queues  # scripts/ is no package: found on the path above

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "deploy" / "k8s"
KEDA_SCHEMA = FOLDER / "schemas" / "keda-scaledobject-v1alpha1.json"
#: The Kubernetes release the manifests are checked against (one that kubernetes-validate ships).
KUBERNETES_VERSION = "1.31.0"
NOT_APPLIED = {"secrets.example.yaml"}  # the Secrets' names and keys, made by hand from files


def check_kubernetes(path: Path, doc: dict[str, Any]) -> str | None:
    """None when ``doc`` passes its Kubernetes schema, else what is wrong."""
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return f"{exc.message} at {'.'.join(str(p) for p in exc.path) or 'the top'}"
    except kubernetes_validate.SchemaNotFoundError:
        return f"no schema for {doc.get('apiVersion')} {doc.get('kind')}: add one, or check it another way"
    return None


def check_keda(path: Path) -> str | None:
    """None when the ScaledObject file passes KEDA's CRD schema (check-jsonschema), else its report."""
    done = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--schemafile", str(KEDA_SCHEMA), str(path)],
        capture_output=True,
        text=True,
    )
    return None if done.returncode == 0 else " ".join((done.stdout + done.stderr).split())


def check_kustomization(doc: dict[str, Any]) -> str | None:
    listed = set(doc.get("resources", []))
    missing = sorted(name for name in listed if not (FOLDER / name).is_file())
    unlisted = sorted(
        p.name for p in FOLDER.glob("*.yaml") if p.name not in listed | NOT_APPLIED | {"kustomization.yaml"}
    )
    if missing or unlisted:
        return f"resources missing from the folder: {missing or 'none'}; manifests not listed: {unlisted or 'none'}"
    return None


def main() -> int:
    failures = 0
    for path in sorted(FOLDER.glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        for doc in docs:
            kind = doc.get("kind")
            if kind == "Kustomization":
                problem = check_kustomization(doc)
            elif kind == "ScaledObject":
                problem = check_keda(path) if len(docs) == 1 else "a ScaledObject must be alone in its file"
            else:
                problem = check_kubernetes(path, doc)
            name = f"{path.relative_to(ROOT)}: {kind} {doc.get('metadata', {}).get('name', '')}".rstrip()
            print(f"{'FAIL' if problem else 'ok  '} {name}" + (f": {problem}" if problem else ""))
            failures += problem is not None
    stale = k8s_queues.stale()
    print(
        f"FAIL per-queue files differ from their templates: {stale} (run `make k8s-queues`)"
        if stale
        else "ok   per-queue files as scripts/k8s_queues.py writes them"
    )
    failures += bool(stale)
    print(
        f"{failures} manifests failed"
        if failures
        else f"every manifest passed (Kubernetes {KUBERNETES_VERSION}, KEDA CRD)"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
