"""The Lua source of one move (``worker/store/lua/<name>.lua``), its includes pasted in.

Apart from :mod:`worker.store.scripts` so that a module the scripts use (:mod:`worker.store.unique`,
whose ``enqueue_once`` the producers call on their own client) reads a source without importing them.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

INCLUDE = re.compile(r'^--- @include "(\w+)"$', re.MULTILINE)


@cache
def source(name: str) -> str:
    """The Lua source of one script, each ``--- @include "name"`` line replaced by that include's text."""
    folder = resources.files("worker.store") / "lua"
    text = (folder / f"{name}.lua").read_text()
    return INCLUDE.sub(lambda include: (folder / "includes" / f"{include[1]}.lua").read_text().rstrip("\n"), text)
