"""Finding the development stack a running ``make run`` started: its URLs, read from its stack file.

The embedded servers (:mod:`worker.embedded`) write ``<data dir>/stack.json`` while they run; the
clients (the worker's ``connect()``, opslib, ``enqueue``) read it here, so finding a running stack
never imports, let alone starts, a server.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from worker.settings import Settings

STACK_FILE = "stack.json"


def running_stack(data_dir: Path) -> dict[str, str] | None:
    """The URLs of a stack that a live ``make run`` started under ``data_dir``, if any."""
    try:
        info = json.loads((data_dir / STACK_FILE).read_text())
        os.kill(int(info["pid"]), 0)
    except (OSError, ValueError, KeyError):
        return None
    return {"redis_url": info.get("redis_url", ""), "database_url": info.get("database_url", "")}


def find_running_stack(data_dir: str | Path) -> dict[str, str] | None:
    """:func:`running_stack` of ``data_dir``; a relative one is looked for from the current
    folder upwards, so a notebook kernel in ``notebooks/`` finds the project's ``.data``."""
    path = Path(data_dir)
    folders = [Path()] if path.is_absolute() else [Path.cwd(), *Path.cwd().parents]
    for folder in folders:
        stack = running_stack(folder / path)
        if stack is not None:
            return stack
    return None


def configured_or_running(settings: Settings, which: str) -> str:
    """The configured ``which`` URL (``redis_url`` or ``database_url``) when set; else, only when no
    server URL is configured at all (the development path), that of a running ``make run`` stack;
    else "" (the caller says what to do about it). A half-configured process never falls back to a
    private server: that is how a health check once reported healthy on the wrong Redis."""
    configured = str(getattr(settings, which))
    if configured or settings.servers_configured:
        return configured
    stack = find_running_stack(settings.data_dir)
    return stack.get(which, "") if stack else ""
