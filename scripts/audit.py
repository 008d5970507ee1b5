"""``make audit``: known vulnerabilities in the locked dependencies, and what could not be checked.

1. pip-audit (run by ``uv tool run``, pinned) on ``uv export --frozen --all-extras``
   (uv.lock's pins with their hashes), asking PyPI's vulnerability API;
2. ``npm audit --package-lock-only`` for the benchmark's BullMQ (benchmarks/bullmq).

Neither tool says plainly when its advisory service did not answer: pip-audit
reports "No known vulnerabilities found" after skipping every package it could
not look up, and npm ends in an HTTP error. This script tells the three cases
apart, one line each: checked and clean, vulnerabilities found (listed), or the
advisory service not reached (and how many packages went unchecked).

Exit status: 0 every package checked and none vulnerable; 1 a vulnerability;
3 some packages could not be checked (the service did not answer).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UV = ROOT / ".tools" / "bin" / "uv"
PIP_AUDIT = "pip-audit==2.10.1"
BULLMQ = ROOT / "benchmarks" / "bullmq"
CLEAN, VULNERABLE, UNCHECKED = 0, 1, 3


def audit_python(folder: Path) -> int:
    requirements, report = folder / "requirements.txt", folder / "pip-audit.json"
    subprocess.run(
        [str(UV), "export", "--frozen", "--all-extras", "--no-emit-project", "--no-header", "--quiet",
         "--output-file", str(requirements)],
        cwd=ROOT, check=True,
    )  # fmt: skip
    done = subprocess.run(
        [str(UV), "tool", "run", "--from", PIP_AUDIT, "pip-audit", "--requirement", str(requirements),
         "--require-hashes", "--disable-pip", "--progress-spinner", "off", "--format", "json",
         "--output", str(report)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if not report.exists():
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        print(f"pip-audit: PyPI's vulnerability API could not be reached; nothing was checked ({last[:200]})")
        return UNCHECKED
    deps = json.loads(report.read_text())["dependencies"]
    vulnerable = [d for d in deps if d.get("vulns")]
    skipped = [d for d in deps if "skip_reason" in d]
    for dep in vulnerable:
        ids = ", ".join(v["id"] for v in dep["vulns"])
        print(f"pip-audit: {dep['name']} {dep['version']} has known vulnerabilities: {ids}")
    if skipped:
        print(
            f"pip-audit: PyPI's vulnerability API did not answer for {len(skipped)} of {len(deps)} locked packages "
            f"(e.g. {skipped[0]['name']}: {skipped[0]['skip_reason']}); those were NOT checked"
        )
    if vulnerable:
        return VULNERABLE
    if skipped:
        return UNCHECKED
    print(f"pip-audit: {len(deps)} locked packages checked, no known vulnerabilities")
    return CLEAN


def audit_node() -> int:
    done = subprocess.run(
        ["npm", "audit", "--package-lock-only", "--json"], cwd=BULLMQ, capture_output=True, text=True, timeout=300
    )
    try:
        report = json.loads(done.stdout or "{}")
    except json.JSONDecodeError:
        report = {}
    counts = report.get("metadata", {}).get("vulnerabilities")
    if counts is None:
        reason = report.get("message") or (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        print(f"npm audit: the npm registry's advisory service could not be reached; nothing was checked ({reason})")
        return UNCHECKED
    found = {level: n for level, n in counts.items() if level != "total" and n}
    if found:
        print(f"npm audit (benchmarks/bullmq): known vulnerabilities: {found}; run npm audit there for details")
        return VULNERABLE
    print("npm audit (benchmarks/bullmq): no known vulnerabilities")
    return CLEAN


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="stagedoor-audit-") as folder:
        results = [audit_python(Path(folder)), audit_node()]
    return VULNERABLE if VULNERABLE in results else max(results)


if __name__ == "__main__":
    sys.exit(main())
