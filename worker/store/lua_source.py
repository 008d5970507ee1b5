"""The Lua source of one move (``worker/store/lua/<name>.lua``), its includes pasted in.

Apart from :mod:`worker.store.scripts` so that a module the scripts use (:mod:`worker.store.unique`,
whose ``enqueue_once`` the producers call on their own client, as :mod:`worker.store.ties`'s
``enqueue_later``) reads a source without importing them.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Any

from redis.commands.core import Script

INCLUDE = re.compile(r'^--- @include "(\w+)"$', re.MULTILINE)


@cache
def source(name: str) -> str:
    """The Lua source of one script, each ``--- @include "name"`` line replaced by that include's text."""
    folder = resources.files("worker.store") / "lua"
    text = (folder / f"{name}.lua").read_text()
    return INCLUDE.sub(lambda include: (folder / "includes" / f"{include[1]}.lua").read_text().rstrip("\n"), text)


def registered(redis: Any, name: str) -> Script:
    """The script ``name`` registered on ``redis``: once per client, kept on it, since a registration
    hashes the source (a call is then one EVALSHA, loaded on NOSCRIPT). For the producers' scripts, called
    on the application's own client."""
    found: dict[str, Script] | None = getattr(redis, "_queue_scripts", None)
    if found is None:
        found = redis._queue_scripts = {}
    if name not in found:
        found[name] = redis.register_script(source(name))
    return found[name]
