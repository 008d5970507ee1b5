"""Run the notebooks against a fresh demo night and store their outputs (what nbval compares).

After changing a notebook, or opslib's output, run::

    .venv/bin/python -m tests.notebooks.refresh_outputs [notebooks/NAME.ipynb ...]

Each notebook gets its own :class:`~tests.notebooks.helpers.NightStack`, as under
nbval, and is executed in place with its outputs kept. By default: every
notebook but the panel's (the runbooks under ``notebooks/runbooks/`` too, with
their default parameters), which Voilà runs in the browser test and which is
kept without outputs.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient

from tests.helpers import ROOT
from tests.notebooks.helpers import NightStack, Servers

NOTEBOOKS = ROOT / "notebooks"
PANEL = NOTEBOOKS / "dead_letter_panel.ipynb"


#: Folders of this machine that tracebacks name, and what the stored outputs say instead (nbval's
#: sanitize.cfg maps a fresh run's paths the same way before it compares).
MACHINE_PATHS = (
    (str(ROOT), "<ROOT>"),
    (sysconfig.get_paths()["stdlib"], "<STDLIB>"),
    (sysconfig.get_paths()["purelib"], "<SITE>"),
)


def without_machine_paths(value: Any) -> Any:
    """``value`` (an output's text or a dict/list of them) with this machine's folders replaced."""
    if isinstance(value, str):
        for path, placeholder in MACHINE_PATHS:
            value = value.replace(path, placeholder)
        return value
    if isinstance(value, list):
        return [without_machine_paths(item) for item in value]
    if isinstance(value, dict):
        return {key: without_machine_paths(item) for key, item in value.items()}
    return value


def refresh(paths: list[Path]) -> None:
    servers = Servers()
    try:
        for path in paths:
            night = NightStack(servers.redis_url, servers.database_url, servers.folder / "worker.log")
            try:
                os.environ.update(night.env())
                notebook = nbformat.read(path, as_version=4)
                NotebookClient(notebook, timeout=300, resources={"metadata": {"path": str(path.parent)}}).execute()
                for cell in notebook.cells:
                    for output in cell.get("outputs", []):
                        for field in ("text", "data", "traceback"):
                            if field in output:
                                output[field] = without_machine_paths(output[field])
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
