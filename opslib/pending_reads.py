"""Reading the pending entries of group ``workers``: who holds which entry, and the fields it names.

Apart from :mod:`opslib.queries` (``pending()``) because :mod:`opslib.kinds` counts the running jobs with it
too, and the queries read the pauses from there.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import redis

from opslib.frames import combine, pending_to_frame
from worker.store.keys import GROUP, Keys
from worker.store.wire import text

#: Pending entries asked for per XPENDING call.
PAGE = 1000


def read_pending(client: Any, parts: list[Keys]) -> pd.DataFrame:
    """Every pending entry of group ``workers`` in every partition, with the fields it names."""
    return combine([read_partition_pending(client, keys) for keys in parts])


def read_partition_pending(client: Any, keys: Keys) -> pd.DataFrame:
    """Every pending entry of one partition's group ``workers`` with the fields it names (page by page)."""
    rows: list[dict[str, Any]] = []
    low = "-"
    while True:
        try:
            page = client.xpending_range(keys.jobs, GROUP, min=low, max="+", count=PAGE)
        except redis.exceptions.ResponseError as exc:
            if "NOGROUP" in str(exc) or "no such key" in str(exc):
                break
            raise
        rows += page
        if len(page) < PAGE:
            break
        low = "(" + text(page[-1]["message_id"])
    pipe = client.pipeline(transaction=False)
    for row in rows:
        entry_id = text(row["message_id"])
        pipe.xrange(keys.jobs, min=entry_id, max=entry_id)
    found = pipe.execute() if rows else []
    entries = {text(row["message_id"]): (hit[0][1] if hit else None) for row, hit in zip(rows, found, strict=True)}
    return pending_to_frame(rows, entries, keys.partition, keys.queue)
