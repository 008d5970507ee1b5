"""Reading rows into a large frame without the cyclic garbage collector walking them in the middle.

One day of the archive is about 17,000 rows: psycopg makes a tuple a row and a list of lists of its wire
fields, the converter a dict a row and a list a column. Every 700 new container objects the collector
walks the young generation, and whatever survives is walked again in the older ones, for nothing: none
of these objects is in a cycle. That was 40% of the conversion of a day's rows to ``archive()``'s frame
(0.29 s with the collector paused against 0.51 s, 2-core dev machine, load 2.3, 2026-12-02), and more on
a loaded machine. :func:`collector_paused` pauses it for such a read and lets it run again after.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Inside the block the cyclic collector does not run (reference counting frees memory as ever); after
    it, the collector runs again if it ran before (a nested pause leaves that to the outer one)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
