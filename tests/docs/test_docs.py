"""The docs cannot drift from the code: their settings tables are the declaration's, every
```python block runs, every relative link leads to a file that exists, and every link to a
heading (``page.md#anchor``) finds that heading, so a renamed section cannot strand a link.

A block runs in a process of its own, in a temp folder, against the test's real servers:
``REDIS_URL``, ``QUEUE_PREFIX`` (a prefix of the test's own) and ``DATABASE_URL`` (a
schema of its own). For the blocks of ``docs/opslib.md`` the queue holds three
render_tickets dead letters (``SeatLabelInvalid``, as the demo night leaves them) and a
send_reminder in ``delayed``, and the schema holds Stagedoor's tables and the dead-letter
archive with those three, so that analysts' examples have something to read and replay;
every other block starts from an empty queue. A block whose info string is
``python no-run`` is shown, not run: keep those rare (it must need something a test
cannot have, such as a container).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from stagedoor.schema import migrate_url
from tests.docs import settings_tables
from tests.helpers import ROOT
from tests.opslib.helpers import bury
from tests.opslib.helpers_archive import archive_dead_stream
from worker.settings import declared
from worker.store.enqueue import enqueue
from worker.store.keys import Keys

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```\s*$", re.DOTALL | re.MULTILINE)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
ANCHORED = re.compile(r"\]\(([^)#\s]*)#([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+)$", re.MULTILINE)
README_MAX_LINES = 200


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    info: str
    code: str

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def python_blocks() -> list[Block]:
    """Every fenced block whose info string starts with ``python``, in page order."""
    blocks = []
    for page in PAGES:
        text = page.read_text()
        for found in FENCE.finditer(text):
            info = found.group(1).strip()
            if info.split(" ")[0] == "python":
                line = text.count("\n", 0, found.start()) + 1
                blocks.append(Block(page, line, info, found.group(2)))
    return blocks


BLOCKS = python_blocks()


def seed_queue(r: redis.Redis, keys: Keys) -> None:
    enqueue(r, "send_reminder", {"order_id": "4471"}, delay_s=6 * 24 * 3600, prefix=keys.prefix)
    for number, label in enumerate(("14-C", "7-A", "3-B")):
        fields = {
            "kind": "render_tickets",
            "outbox_id": str(90 + number),
            "attempts": "1",
            "order_id": str(4471 + number),
        }
        error = {
            "attempts": "2",
            "error": f"SeatLabelInvalid: {label!r} is not a row letter and a seat number",
            "traceback": "Traceback (most recent call last):\n  File ticket_pdf.py, line 88, in barcode_for\n",
            "reason": "exhausted",
            "failed_at": "2026-11-30T21:14:00.000Z",
            "worker": "docs",
        }
        bury(r, keys, fields, error)


@pytest.mark.parametrize("name", list(settings_tables.TABLES))
def test_the_settings_tables_are_the_declaration(name: str) -> None:
    page = settings_tables.TABLES[name][0]
    table = settings_tables.current(name)
    assert table is not None, f"docs/{page} has no <!-- settings:{name} --> ... <!-- /settings:{name} --> markers"
    regenerate = ".venv/bin/python -m tests.docs.settings_tables"
    assert table == settings_tables.generated(name), (
        f"docs/{page}: table differs from its declaration; run {regenerate}"
    )


def test_no_page_lists_a_setting_by_hand() -> None:
    """Outside the generated tables, no table row starts with a setting's name."""
    names = {spec.env for _, cls in settings_tables.TABLES.values() for spec in declared(cls).values()}
    for page in PAGES:
        text = page.read_text()
        for name in settings_tables.TABLES:
            text = settings_tables.block(name).sub("", text)
        by_hand = [line for line in text.splitlines() if line.startswith("| `") and line[3:].split("`")[0] in names]
        assert not by_hand, f"{page.name} lists settings by hand (generate them instead): {by_hand}"


def test_the_readme_stays_short() -> None:
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move reference text to docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_lead_to_files(page: Path) -> None:
    for target in LINK.findall(page.read_text()):
        if "://" in target or target.startswith("mailto:"):
            continue
        assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"


def anchors(page: Path) -> set[str]:
    """The anchors of ``page``'s headings as GitHub makes them: lower case, punctuation dropped, spaces to
    hyphens, a repeated one numbered; headings inside fenced blocks are not headings."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in HEADING.findall(FENCE.sub("", page.read_text())):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return found


@pytest.mark.parametrize(
    "page", [*PAGES, *sorted((ROOT / "docs" / "history").glob("*.md"))], ids=lambda p: str(p.relative_to(ROOT))
)
def test_links_to_a_heading_find_it(page: Path) -> None:
    for target, anchor in ANCHORED.findall(page.read_text()):
        if "://" in target:
            continue
        linked = (page.parent / target).resolve() if target else page
        if linked.suffix != ".md":
            continue
        assert linked.exists(), f"{page.name} links to {target}, which does not exist"
        assert anchor in anchors(linked), f"{page.name} links to {target}#{anchor}: {linked.name} has no such heading"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_python_example_runs(
    block: Block, redis_url: str, prefix: str, pg_url: str, r: redis.Redis, tmp_path: Path
) -> None:
    if block.info != "python":
        assert block.info == "python no-run", f"{block.name}: unknown info string {block.info!r}"
        pytest.skip(f"{block.name} is marked no-run")
    if block.page.name == "opslib.md":
        seed_queue(r, Keys(prefix))
        migrate_url(pg_url)
        archive_dead_stream(r, Keys(prefix), pg_url)
    # As a user runs them: the archive beside the application's tables (ARCHIVE_URL empty).
    env = {k: v for k, v in os.environ.items() if k not in ("WORKER_KINDS", "ARCHIVE_URL")}
    env.update(
        REDIS_URL=redis_url,
        QUEUE_PREFIX=prefix,
        DATABASE_URL=pg_url,
        WORKER_DATA_DIR=str(tmp_path / "data"),
        PYTHONPATH=str(ROOT),
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", block.code],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=180,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.name}: the example did not finish within 180 s")
    assert done.returncode == 0, f"{block.name} failed:\n{block.code}\n--- output ---\n{done.stdout}{done.stderr}"
