"""A dead letter's attempts, as a person reads them: when, how long, where, and the error.

The ``attempt_log`` field (:mod:`worker.store.attempt_log`) holds the last
attempts of a job since it was enqueued or replayed. :func:`attempt_rows`
turns it into ``(label, line)`` pairs for ``show()`` and the panel: the
attempt's number, then its time in the display zone, its duration, the
worker and the error; :func:`attempts_frame` into a frame
(``opslib.show(dead_id).attempts``). The log is written by workers but may be typed by
anyone at redis-cli, so a value that is not what it should be is shown as
it is, never trusted; the HTML views escape every line.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from opslib.columns import COUNT, DURATION, TEXT, TIME, typed_frame
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


#: ``show(dead_id).attempts``: one row per attempt kept, oldest first.
ATTEMPT_COLUMNS = {"attempt": COUNT, "at": TIME, "duration": DURATION, "worker": TEXT, "error": TEXT}


def _first(kept: int, attempts: int | None) -> int:
    """The number of the first attempt kept: counted back from ``attempts`` (the attempts made), else 1."""
    return attempts - kept + 1 if attempts is not None and attempts >= kept else 1


def attempts_frame(log: str, attempts: int | None = None) -> pd.DataFrame:
    """The attempts of an ``attempt_log`` field as a frame (:data:`ATTEMPT_COLUMNS`); a time or duration
    that is not one is NaT."""
    kept = attempt_log.parse(log)
    first = _first(len(kept), attempts)
    seconds = pd.to_numeric(pd.Series([item["duration_s"] for item in kept], dtype=object), errors="coerce")
    columns = {
        "attempt": range(first, first + len(kept)),
        "at": pd.to_datetime(
            pd.Series([str(item["at"]) for item in kept], dtype=object), errors="coerce", utc=True, format="ISO8601"
        ),
        "duration": pd.to_timedelta(seconds, unit="s"),
        "worker": [str(item["worker"]) for item in kept],
        "error": [str(item["error"]) for item in kept],
    }
    return typed_frame({name: list(values) for name, values in columns.items()}, ATTEMPT_COLUMNS)


def attempt_rows(log: str, attempts: int | None = None) -> list[tuple[str, str]]:
    """The attempts of an ``attempt_log`` field, oldest first, as ``("attempt 3", "<time> · <duration> ·
    <worker> · <error>")``; numbered back from ``attempts`` (the attempts made) when the log kept only
    the last ones, else from 1. ``[]`` when the field holds none."""
    kept = attempt_log.parse(log)
    first = _first(len(kept), attempts)
    return [
        (
            f"attempt {first + number}",
            " · ".join((_when(item["at"]), _took(item["duration_s"]), str(item["worker"]), str(item["error"]))),
        )
        for number, item in enumerate(kept)
    ]
