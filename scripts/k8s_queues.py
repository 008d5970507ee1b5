"""`make k8s-queues`: the worker Deployment and KEDA ScaledObject of each queue, written from one template each.

One Deployment per queue (WORKER_QUEUES=<queue>), each scaled by its own ScaledObject on that queue's backlog
and running jobs (docs/operations.md, "On Kubernetes"). The files are plain YAML, what the cluster gets, so that
`make k8s-check` validates them offline as they are applied; a kustomize overlay per queue would need a
kustomize binary to show what it renders, which a fresh clone without network does not have. So the copies are
written here from deploy/k8s/templates/, never by hand, and `make k8s-check` fails when one differs from what
this script writes (run it after editing a template or :data:`QUEUES`).
"""

from __future__ import annotations

import string
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "deploy" / "k8s"
TEMPLATES = FOLDER / "templates"

#: Stagedoor's queues (stagedoor/kinds.py declares each kind's) and the most worker replicas each may get.
QUEUES = {"critical": 8, "default": 12, "bulk": 4}
#: Each template and the file it becomes for a queue.
OUTPUTS = {"worker-deployment.yaml": "worker-{queue}.yaml", "scaledobject.yaml": "scaledobject-{queue}.yaml"}


def rendered() -> dict[Path, str]:
    """Every per-queue file and its text, from the templates."""
    files = {}
    for template, output in OUTPUTS.items():
        text = string.Template((TEMPLATES / template).read_text())
        for queue, max_replicas in QUEUES.items():
            header = (
                f"# Written by scripts/k8s_queues.py from templates/{template}: edit that, then `make k8s-queues`.\n"
            )
            files[FOLDER / output.format(queue=queue)] = header + text.substitute(
                queue=queue, max_replicas=max_replicas
            )
    return files


def stale() -> list[str]:
    """The per-queue files missing or differing from what :func:`rendered` writes (their names)."""
    return sorted(p.name for p, text in rendered().items() if not p.is_file() or p.read_text() != text)


def main() -> int:
    for path, text in rendered().items():
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
