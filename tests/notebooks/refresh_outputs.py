"""Run the notebooks against a fresh demo night and store their outputs (what nbval compares).

After changing a notebook, or opslib's output, run::

    .venv/bin/python -m tests.notebooks.refresh_outputs [notebooks/NAME.ipynb ...]

Each notebook gets its own :class:`~tests.notebooks.helpers.NightStack`, as under
nbval, and is executed in place with its outputs kept. By default: every
notebook but the panel's (the runbooks under ``notebooks/runbooks/`` too, with
their default parameters), which Voilà runs in the browser test: its stored
output is a picture of the panel for readers without a kernel (GitHub,
nbviewer, an HTML export), which the browser test writes with
``UPDATE_SCREENSHOTS=1`` (:func:`store_panel_picture`).
"""

from __future__ import annotations

import base64
import html
import os
import sys
import sysconfig
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient

from tests.helpers import ROOT
from tests.notebooks.helpers import NightStack, Servers, nights_for

NOTEBOOKS = ROOT / "notebooks"
PANEL = NOTEBOOKS / "dead_letter_panel.ipynb"


#: Folders of this machine that tracebacks name, and what the stored outputs say instead (nbval's
#: sanitize.cfg maps a fresh run's paths the same way before it compares).
MACHINE_PATHS = (
    (str(ROOT), "<ROOT>"),
    (sysconfig.get_paths()["stdlib"], "<STDLIB>"),
    (sysconfig.get_paths()["purelib"], "<SITE>"),
)


def without_machine_paths(value: Any, *, html_text: bool = False) -> Any:
    """``value`` (an output's text or a dict/list of them) with this machine's folders replaced.

    In an HTML output (``text/html``, or ``html_text``) the placeholder is escaped (``&lt;ROOT&gt;``): written raw,
    a page would take ``<ROOT>`` for a tag and show ``File "/worker/...``.
    """
    if isinstance(value, str):
        for path, placeholder in MACHINE_PATHS:
            value = value.replace(path, html.escape(placeholder) if html_text else placeholder)
        return value
    if isinstance(value, list):
        return [without_machine_paths(item, html_text=html_text) for item in value]
    if isinstance(value, dict):
        return {
            key: without_machine_paths(item, html_text=html_text or key == "text/html") for key, item in value.items()
        }
    return value


PICTURE_NOTE = "A picture of the dead-letter panel on the demo night: run this cell for the live panel."


def store_panel_picture(png: bytes) -> None:
    """Make ``png`` the panel notebook's stored output, shown where no kernel runs; running the cell replaces it."""
    notebook = nbformat.read(PANEL, as_version=4)
    [cell] = [cell for cell in notebook.cells if cell.cell_type == "code"]
    data = {"image/png": base64.b64encode(png).decode("ascii"), "text/plain": PICTURE_NOTE}
    cell.outputs = [nbformat.v4.new_output("display_data", data=data, metadata={"image/png": {"width": 900}})]
    cell.execution_count = None
    nbformat.write(notebook, PANEL)


def refresh(paths: list[Path]) -> None:
    servers = Servers()
    try:
        for path in paths:
            log = servers.folder / "worker.log"
            night = NightStack(servers.redis_url, servers.database_url, log, nights=nights_for(path))
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
