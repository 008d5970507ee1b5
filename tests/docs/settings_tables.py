"""The settings tables in the docs, generated from the one declaration of each setting.

``docs/worker.md`` carries ``settings_markdown(Settings)`` and ``docs/stagedoor.md``
``settings_markdown(StagedoorSettings)``, each between marker comments
(``<!-- settings:worker -->`` ... ``<!-- /settings:worker -->``). After changing a
setting, rewrite the tables with::

    .venv/bin/python -m tests.docs.settings_tables

``tests/docs/test_docs.py`` fails while a table differs from its declaration.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from opslib.settings import OpslibSettings
from stagedoor.settings import StagedoorSettings
from worker.settings import Settings, settings_markdown

DOCS = Path(__file__).resolve().parents[2] / "docs"

#: Marker name -> (page, the settings dataclass whose table it carries).
TABLES: dict[str, tuple[str, type]] = {
    "worker": ("worker.md", Settings),
    "stagedoor": ("stagedoor.md", StagedoorSettings),
    "opslib": ("opslib.md", OpslibSettings),
}


def block(name: str) -> re.Pattern[str]:
    """The text between the two marker comments of ``name`` (markers kept, in groups 1 and 3)."""
    return re.compile(rf"(<!-- settings:{name} -->\n)(.*?)(<!-- /settings:{name} -->)", re.DOTALL)


def current(name: str) -> str | None:
    """The table the page carries now, or None when its markers are missing."""
    page, _ = TABLES[name]
    found = block(name).search((DOCS / page).read_text())
    return found.group(2) if found else None


def generated(name: str) -> str:
    """The table the declaration gives."""
    return settings_markdown(TABLES[name][1]) + "\n"


def rewrite(name: str) -> bool:
    """Put the generated table between the markers; True when the page changed."""
    path = DOCS / TABLES[name][0]
    before = path.read_text()
    after, found = block(name).subn(lambda m: m.group(1) + generated(name) + m.group(3), before)
    if not found:
        raise SystemExit(f"{path}: no <!-- settings:{name} --> ... <!-- /settings:{name} --> markers")
    if after != before:
        path.write_text(after)
    return after != before


def main() -> int:
    for name, (page, _) in TABLES.items():
        print(f"docs/{page}: {'rewritten' if rewrite(name) else 'up to date'} ({name} settings)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
