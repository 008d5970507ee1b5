"""The figures of docs/architecture.md's "One entry's path, measured" are today's: the path one entry's id
takes through ``worker/`` (``benchmarks/entry_path.py``'s tracer, the same worker in this process) has the
stops and files the table gives, for a success and for a dead letter."""

from __future__ import annotations

import re

import pytest
import redis

from benchmarks.entry_path import handler_for, traced_run
from tests.helpers import ROOT
from worker.settings import Settings
from worker.store.enqueue import enqueue
from worker.store.keys import Keys

#: The table's row name for each outcome the tracer runs.
ROWS = {"succeed": "success", "dead": "dead-lettered"}


def documented(row: str) -> tuple[int, int]:
    """(stops, files) of the table's row."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    found = re.search(rf"^\| {row} \| (\d+) \| (\d+) \|", page, re.MULTILINE)
    assert found, f"docs/architecture.md's entry-path table has no row `| {row} | stops | files | ... |`"
    return int(found[1]), int(found[2])


@pytest.mark.parametrize("outcome", list(ROWS))
def test_the_documented_entry_path_is_todays(outcome: str, r: redis.Redis, keys: Keys, redis_url: str) -> None:
    settings = Settings.from_env({"REDIS_URL": redis_url, "QUEUE_PREFIX": keys.prefix, "ARCHIVE_URL": "off"})
    registry, kind = handler_for(outcome)
    entry_id = enqueue(r, kind, {"order_id": "4471"}, prefix=keys.prefix)
    stops = traced_run(settings, registry, entry_id).stops()
    files = {filename for filename, _ in stops}
    path = "\n".join(f"  {filename}: {', '.join(functions)}" for filename, functions in stops)
    assert (len(stops), len(files)) == documented(ROWS[outcome]), (
        f"the entry's path now makes {len(stops)} stops in {len(files)} files; update docs/architecture.md "
        f"('One entry's path, measured': .venv/bin/python -m benchmarks.entry_path --outcome {outcome}):\n{path}"
    )
