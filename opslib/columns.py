"""The dtypes every opslib frame uses, and the helper that fixes them.

Each frame function declares its columns as an ordered ``{name: dtype}``
map and builds its frame with :func:`typed_frame`, so the column order and
dtypes are the same whether the queue holds 10,000 entries or none:
timestamps are ``datetime64[ns, UTC]``, durations ``timedelta64[ns]``, counts
``int64``, ids and text pandas' ``str``. Each carries ``attrs["opslib"]``, so
that Jupyter shows it readably (:mod:`opslib.display`) while its data stays as is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

TEXT = "str"
TIME = "datetime64[ns, UTC]"
DURATION = "timedelta64[ns]"
COUNT = "int64"
FLAG = "bool"
OBJECT = "object"
MARK = "opslib"
"""The ``attrs`` key that marks a frame opslib made: Jupyter renders it for a person (:mod:`opslib.display`)."""


def typed_frame(
    columns: Mapping[str, Sequence[Any]],
    dtypes: Mapping[str, str],
    index: pd.Index | None = None,
) -> pd.DataFrame:
    """A frame with exactly the columns of ``dtypes``, in that order, each cast to its dtype.

    Columns in ``columns`` but not in ``dtypes`` (a dead letter's payload
    fields) follow, as text.
    """
    data: dict[str, pd.Series] = {}
    for name, dtype in dtypes.items():
        data[name] = pd.Series(columns.get(name, []), dtype=dtype, index=index)
    for name, values in columns.items():
        if name not in dtypes:
            data[name] = pd.Series(values, dtype=TEXT, index=index)
    frame = pd.DataFrame(data, index=index)
    frame.attrs[MARK] = True
    return frame


def entry_times(entry_ids: Sequence[str]) -> pd.DatetimeIndex:
    """The creation time of stream entries, from the milliseconds in their ids (UTC)."""
    millis = [int(entry_id.partition("-")[0]) for entry_id in entry_ids]
    return pd.DatetimeIndex(pd.to_datetime(millis, unit="ms", utc=True)).as_unit("ns")
