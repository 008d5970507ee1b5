"""Run a runbook notebook for one kind: ``python -m opslib runbook KIND [--since 2h] [--signature S] [--out DIR]``.

The runbook (``notebooks/runbooks/investigate_kind.ipynb``) has a cell tagged
``parameters`` (``kind``, ``since``, ``signature``). :func:`run_runbook`
executes it with papermill, the parameters filled in, into
``DIR/<UTC time>-<kind>.ipynb``, and writes an HTML copy beside it
(nbconvert), so the page an alert sends leads to a notebook already run for
tonight's kind. The kernel inherits this process's environment (``REDIS_URL``,
``DATABASE_URL``, ``QUEUE_PREFIX``, ``OPSLIB_TZ``, ``OPSLIB_TRACE_URL``), so it reads the same queue
and its examples link to their traces.

A cell that raises stops the run; :class:`RunbookFailed` names the cell
(its number and first line) and the error, and the notebook and its HTML are
still written, with the error in place, for a person to read.

What the run leaves reads once and quietly: the parameters appear once (the
values given, where the defaults stood: papermill's injected cell replaces
the ``parameters`` cell rather than following it); the kernel talks over
IPC sockets in a private temporary folder, so ipykernel has no reason to
warn on the terminal about unencrypted TCP; the HTML copy wraps long output
lines between words only (:data:`HTML_STYLE`).
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis

from opslib.errors import OpslibError, UnknownKind
from opslib.signatures import check_signature
from opslib.times import parse_since

ROOT = Path(__file__).resolve().parents[1]
RUNBOOKS = ROOT / "notebooks" / "runbooks"
INVESTIGATE_KIND = RUNBOOKS / "investigate_kind.ipynb"
DEFAULT_OUT = Path("runbook-runs")
CELL_TIMEOUT_S = 600
UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
HTML_STYLE = (
    "<style>.jp-OutputArea-output pre{word-break:normal;overflow-wrap:normal}"
    ".jp-OutputArea-output pre, .opslib-show pre{font-family:var(--jp-code-font-family,monospace)}</style>"
)
"""Added to the HTML copy: nbconvert's page breaks output lines anywhere, even inside a name or an id."""


@dataclass(frozen=True)
class RunbookRun:
    """Where an executed runbook was written: the notebook and its HTML copy."""

    notebook: Path
    html: Path


class RunbookFailed(OpslibError):
    """A cell of the runbook raised; the message names the cell and the error, ``run`` where it was written."""

    def __init__(self, message: str, run: RunbookRun) -> None:
        super().__init__(message)
        self.run = run


def output_stem(kind: str, now: datetime | None = None) -> str:
    """``<UTC time>-<kind>``, e.g. ``20261130T211400Z-render_tickets`` (characters unsafe in a file name as ``_``)."""
    at = (now or datetime.now(UTC)).astimezone(UTC)
    return f"{at:%Y%m%dT%H%M%SZ}-{UNSAFE.sub('_', kind)}"


def check_kind_to_investigate(kind: str) -> None:
    """Refuse an unknown kind (:class:`~opslib.errors.UnknownKind`: nothing to investigate). A queue that
    cannot be read for the check is left to the runbook, whose cells say what failed."""
    from opslib.kinds import check_kind_known

    try:
        check_kind_known(kind)
    except UnknownKind:
        raise
    except (OpslibError, redis.exceptions.RedisError):
        return


def run_runbook(
    kind: str,
    *,
    since: str = "24h",
    signature: str | None = None,
    out: Path = DEFAULT_OUT,
    notebook: Path = INVESTIGATE_KIND,
) -> RunbookRun:
    """Execute ``notebook`` for ``kind`` into ``out``; raises :class:`RunbookFailed` when a cell fails."""
    import nbformat
    import papermill
    from nbconvert import HTMLExporter

    if not isinstance(kind, str) or not kind.strip():
        raise OpslibError(f"kind must be a job kind such as 'render_tickets', got {kind!r}")
    parse_since(since)
    if signature is not None:
        check_signature(signature)
    check_kind_to_investigate(kind)
    if not notebook.exists():
        raise OpslibError(f"no runbook at {notebook}: run from a checkout of the project (notebooks/runbooks/)")
    out.mkdir(parents=True, exist_ok=True)
    stem = output_stem(kind)
    run = RunbookRun(out / f"{stem}.ipynb", out / f"{stem}.html")
    failure: Exception | None = None
    with tempfile.TemporaryDirectory(prefix="opslib-runbook-") as sockets:
        try:
            papermill.execute_notebook(
                str(notebook),
                str(run.notebook),
                parameters={"kind": kind, "since": since, "signature": signature},
                cwd=str(notebook.parent),
                progress_bar=False,
                execution_timeout=CELL_TIMEOUT_S,
                config=ipc_kernel(Path(sockets)),
            )
        except papermill.PapermillExecutionError as exc:
            failure = exc
    executed = parameters_once(nbformat.read(run.notebook, as_version=4))
    nbformat.write(executed, run.notebook)
    body, _resources = HTMLExporter().from_notebook_node(executed)
    run.html.write_text(body.replace("</head>", HTML_STYLE + "</head>", 1), encoding="utf-8")
    if failure is not None:
        error = f"{failure.ename}: {failure.evalue}"  # type: ignore[attr-defined]
        raise RunbookFailed(f"{describe_failed_cell(executed)}: {error}", run)
    return run


def ipc_kernel(folder: Path) -> Any:
    """The kernel's configuration: IPC sockets in ``folder`` (loopback TCP makes ipykernel warn on the terminal)."""
    from traitlets.config import Config

    config = Config()
    config.KernelManager.transport = "ipc"
    config.KernelManager.ip = str(folder / "kernel")
    config.NotebookClient.shutdown_kernel = "immediate"  # over IPC a graceful stop ends in a logged SIGINT
    return config


def parameters_once(executed: Any) -> Any:
    """``executed`` with papermill's injected parameters in place of the default ``parameters`` cell.

    papermill adds a cell tagged ``injected-parameters`` after the one tagged
    ``parameters``; a reader would see two sets of values, the first not used.
    """
    cells = executed.cells
    injected = [n for n, cell in enumerate(cells) if "injected-parameters" in cell.metadata.get("tags", [])]
    defaults = [n for n, cell in enumerate(cells) if "parameters" in cell.metadata.get("tags", [])]
    if injected and defaults:
        cells[injected[0]].source = (
            "# Parameters (given to python -m opslib runbook)\n"
            + "\n".join(line for line in cells[injected[0]].source.splitlines() if not line.startswith("#")).strip()
        )
        del cells[defaults[0]]
    return executed


def describe_failed_cell(executed: object) -> str:
    """``cell 5 ("dead = opslib.dead_letters(...)")`` for the first code cell with an error output."""
    code_cells = [cell for cell in executed.cells if cell.cell_type == "code"]  # type: ignore[attr-defined]
    for number, cell in enumerate(code_cells, start=1):
        if any(output.get("output_type") == "error" for output in cell.get("outputs", [])):
            first = next((line for line in cell.source.splitlines() if line.strip()), "")
            return f'the runbook failed in code cell {number} ("{first[:80]}")'
    return "the runbook failed"
