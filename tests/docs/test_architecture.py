"""docs/architecture.md names every module of worker/ and opslib/, and every page links every other."""

from __future__ import annotations

import re

from tests.helpers import ROOT

DOCS = ROOT / "docs"
#: The pages in the order of every navigation line (after the README).
PAGES = ("worker", "architecture", "cluster", "operations", "opslib", "stagedoor", "performance", "reliability")


def modules() -> list[str]:
    """Every Python module and Lua file of the two packages, as paths from the repository's root."""
    found = []
    for package in ("worker", "opslib"):
        for path in sorted((ROOT / package).rglob("*")):
            if path.suffix in (".py", ".lua") and "__pycache__" not in path.parts:
                found.append(path.relative_to(ROOT).as_posix())
    return found


def test_the_module_map_names_every_module_with_a_line() -> None:
    page = (DOCS / "architecture.md").read_text()
    rows = dict(re.findall(r"^\| `([\w/.]+)` \| (.+) \|$", page, re.MULTILINE))
    missing = [module for module in modules() if module not in rows]
    assert not missing, f"docs/architecture.md's module map lacks {missing}: add a row `| `path` | what it holds |`"
    gone = sorted(set(rows) - set(modules()))
    assert not gone, f"docs/architecture.md's module map names modules that do not exist: {gone}"


def test_every_page_has_the_same_navigation_line_and_the_readme_lists_every_page() -> None:
    readme = (ROOT / "README.md").read_text()
    for name in PAGES:
        text = (DOCS / f"{name}.md").read_text()
        navigation = " ".join(text.split("\n\n")[1].split())
        expected = " · ".join(
            ["[README](../README.md)", *(f"**{p}**" if p == name else f"[{p}]({p}.md)" for p in PAGES)]
        )
        assert navigation == expected, f"docs/{name}.md: the navigation line should read {expected}"
        assert f"[docs/{name}.md](docs/{name}.md)" in readme, f"README.md's documentation list lacks {name}.md"
    assert sorted(p.stem for p in DOCS.glob("*.md")) == sorted(PAGES)


def test_opslibs_column_tables_name_every_column_of_each_frame_in_order() -> None:
    from opslib.actions import ACTION_COLUMNS
    from opslib.archive_frames import ARCHIVE_COLUMNS, HISTORY_COLUMNS
    from opslib.frames import (
        DEAD_COLUMNS,
        DELAYED_COLUMNS,
        PENDING_COLUMNS,
        PENDING_COUNT_COLUMNS,
        REPLAY_COLUMNS,
        STATUS_COLUMNS,
    )
    from opslib.kinds import KIND_COLUMNS
    from opslib.moves.delayed_jobs import MOVE_COLUMNS
    from opslib.moves.incident import DONE_COLUMNS
    from opslib.signatures import GROUP_COLUMNS

    frames = {
        "dead_letters": DEAD_COLUMNS,
        "failure_groups": GROUP_COLUMNS,
        "pending": PENDING_COLUMNS,
        "pending_counts": PENDING_COUNT_COLUMNS,
        "delayed": DELAYED_COLUMNS,
        "replay": REPLAY_COLUMNS,
        "replay_status": STATUS_COLUMNS,
        "run_now": MOVE_COLUMNS,
        "archive": ARCHIVE_COLUMNS,
        "history": HISTORY_COLUMNS,
        "kinds": KIND_COLUMNS,
        "actions": ACTION_COLUMNS,
        "pause": DONE_COLUMNS,
    }
    page = (DOCS / "opslib.md").read_text()
    for function, columns in frames.items():
        row = re.search(rf"^\| `{function}\(.*\| (.+) \|$", page, re.MULTILINE)
        assert row, f"docs/opslib.md has no row for {function}()"
        text, at = row[1], 0
        for column in columns:
            found = re.search(rf"(?<![\w:]){re.escape(column)}(?!\w)", text[at:])
            assert found, f"docs/opslib.md: {function}()'s columns lack {column} (after position {at})"
            at += found.end()
