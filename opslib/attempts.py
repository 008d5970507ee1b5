"""A dead letter's attempts, as a person reads them: when, how long, where, and the error.

The ``attempt_log`` field (:mod:`worker.store.attempt_log`) holds the last
attempts of a job since it was enqueued or replayed. :func:`attempt_rows`
turns it into ``(label, line)`` pairs for ``show()`` and the panel: the
attempt's number, then its time in the display zone, its duration, the
worker and the error. The log is written by workers but may be typed by
anyone at redis-cli, so a value that is not what it should be is shown as
it is, never trusted; the HTML views escape every line.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from opslib.display import duration, local_time
from worker.store import attempt_log


def _when(value: Any) -> str:
    try:
        return local_time(pd.Timestamp(value)) or str(value)
    except (ValueError, TypeError):
        return str(value)


def _took(value: Any) -> str:
    try:
        return duration(pd.Timedelta(seconds=float(value)))
    except (ValueError, TypeError):
        return str(value)


def attempt_rows(log: str, attempts: int | None = None) -> list[tuple[str, str]]:
    """The attempts of an ``attempt_log`` field, oldest first, as ``("attempt 3", "<time> · <duration> ·
    <worker> · <error>")``; numbered back from ``attempts`` (the attempts made) when the log kept only
    the last ones, else from 1. ``[]`` when the field holds none."""
    kept = attempt_log.parse(log)
    first = attempts - len(kept) + 1 if attempts is not None and attempts >= len(kept) else 1
    return [
        (
            f"attempt {first + number}",
            " · ".join((_when(item["at"]), _took(item["duration_s"]), str(item["worker"]), str(item["error"]))),
        )
        for number, item in enumerate(kept)
    ]
