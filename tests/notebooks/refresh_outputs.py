"""Run the notebooks against a fresh demo night and store their outputs (what nbval compares).

After changing a notebook, or opslib's output, run::

    .venv/bin/python -m tests.notebooks.refresh_outputs [notebooks/NAME.ipynb ...]

Each notebook gets its own :class:`~tests.notebooks.stack.NightStack`, as under
nbval, and is executed in place with its outputs kept. By default: every
notebook but the panel's (the runbooks under ``notebooks/runbooks/`` too, with
their default parameters), which Voilà runs in the browser test and which is
kept without outputs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from tests.helpers import ROOT
from tests.notebooks.stack import NightStack, Servers

NOTEBOOKS = ROOT / "notebooks"
PANEL = NOTEBOOKS / "dead_letter_panel.ipynb"


def refresh(paths: list[Path]) -> None:
    servers = Servers()
    try:
        for path in paths:
            night = NightStack(servers.redis_url, servers.database_url, servers.folder / "worker.log")
            try:
                os.environ.update(night.env())
                notebook = nbformat.read(path, as_version=4)
                NotebookClient(notebook, timeout=300, resources={"metadata": {"path": str(path.parent)}}).execute()
                nbformat.write(notebook, path)
                print(f"refreshed {path.relative_to(ROOT)}")
            finally:
                night.stop()
    finally:
        servers.stop()


if __name__ == "__main__":
    refresh(
        [Path(arg).resolve() for arg in sys.argv[1:]]
        or sorted({p for p in NOTEBOOKS.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts} - {PANEL})
    )
