"""Error signatures: the error text with its variable parts replaced, and grouping by it.

Forty dead letters from one bug differ only in the values their errors
quote: ``SeatLabelInvalid: '14-C' is not ...`` and ``SeatLabelInvalid:
'7-A' is not ...``. :func:`signature` replaces quoted values with ``<str>``,
timestamps with ``<time>``, UUIDs and stream entry ids with ``<id>``, hex
runs with ``<hex>`` and numbers with ``<num>``, and folds whitespace, so both
read ``SeatLabelInvalid: <str> is not ...`` and form one group. A signature
is a fixed point (``signature(s) == s``), which is how :func:`check_signature`
tells a signature from a raw error message pasted by mistake.

:func:`failure_groups_to_frame` is the pure grouping behind
``opslib.failure_groups``; it takes the frame of ``dead_letters`` and needs no
Redis.
"""

from __future__ import annotations

import re

import pandas as pd

from opslib.errors import OpslibError
from opslib.frames import TEXT, TIME, typed_frame

MAX_SIGNATURE_CHARS = 300
"""Signatures are cut to this length; the error is read up to four times as far."""

# One scan of the whitespace-folded text; at each position the first alternative that matches wins.
# The lookahead skips, cheaply, the positions where none can start (a quote, a digit, a hex letter
# at the start of a word): it halves the time of grouping 10,000 errors.
_VARIABLE = re.compile(
    r"(?=['\"`0-9]|\b[a-fA-F])(?:"
    + "|".join(
        f"(?P<{name}>{pattern})"
        for name, pattern in (
            # quoted values: 'x', "x" (with backslash escapes) and `x`, where the opening quote does
            # not follow a letter (the apostrophe of "can't" opens nothing)
            ("str", r"(?<![A-Za-z])(?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|`[^`]*`)"),
            ("time", r"\b\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?"),
            ("uuid", r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"),
            ("entry", r"\b\d{13}-\d+\b"),
            ("hex", r"\b0[xX][0-9a-fA-F]+\b|\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b"),
            ("num", r"(?<![A-Za-z0-9])\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"),
        )
    )
    + ")"
)
_PLACEHOLDER = {"str": "<str>", "time": "<time>", "uuid": "<id>", "entry": "<id>", "hex": "<hex>", "num": "<num>"}


def _placeholder(match: re.Match[str]) -> str:
    return _PLACEHOLDER[match.lastgroup or "str"]


_ERROR_TYPE = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)")


def signature(error: str) -> str:
    """The error with its variable parts replaced by placeholders (at most 300 characters)."""
    folded = " ".join(error[: MAX_SIGNATURE_CHARS * 4].split())
    return _VARIABLE.sub(_placeholder, folded)[:MAX_SIGNATURE_CHARS].rstrip()


def error_type(error: str) -> str:
    """The exception name at the start of ``Type: message`` (``""`` when there is none)."""
    match = _ERROR_TYPE.match(error)
    return match.group(1) if match else ""


def check_signature(value: object) -> str:
    """``value`` when it is a signature as :func:`signature` writes it; an :class:`OpslibError` otherwise."""
    if not isinstance(value, str) or not value.strip():
        raise OpslibError(
            f"signature must be a non-empty string, got {value!r}; copy one from failure_groups().signature"
        )
    normal = signature(value)
    if normal != value:
        raise OpslibError(
            f"{value[:120]!r} is not a signature (an error message, or a signature that was edited); "
            f"its signature is {normal[:120]!r}. Copy one from failure_groups().signature"
        )
    return value


GROUP_COLUMNS = {
    "signature": TEXT,
    "error_type": TEXT,
    "kinds": TEXT,
    "count": "int64",
    "first_seen": TIME,
    "last_seen": TIME,
    "example_id": TEXT,
    "example_error": TEXT,
}


def failure_groups_to_frame(dead: pd.DataFrame) -> pd.DataFrame:
    """One row per error signature of ``dead`` (a ``dead_letters()`` frame), the largest group first.

    Columns: signature (str), error_type (str), kinds (str: the kinds in the
    group, sorted, comma-separated), count (int64), first_seen and last_seen
    (datetime64[ns, UTC]: the oldest and newest ``dead_at``), example_id (str:
    the newest entry's id), example_error (str: its error). Ties in count go
    to the group seen first. Index: 0..n-1.
    """
    if dead.empty:
        return typed_frame({name: [] for name in GROUP_COLUMNS}, GROUP_COLUMNS)
    dead = dead.sort_values("dead_at", kind="stable")
    grouped = dead.groupby("signature", sort=False, observed=True)
    newest = dead.index.to_series().groupby(dead["signature"].to_numpy(), sort=False).last()
    columns = {
        "signature": list(newest.index),
        "error_type": list(dead.loc[newest.values, "error_type"]),
        "kinds": [", ".join(sorted(set(kinds))) for kinds in grouped["kind"].agg(list)],
        "count": list(grouped.size()),
        "first_seen": list(grouped["dead_at"].min()),
        "last_seen": list(grouped["dead_at"].max()),
        "example_id": list(newest.values),
        "example_error": list(dead.loc[newest.values, "error"]),
    }
    frame = typed_frame(columns, GROUP_COLUMNS)
    return frame.sort_values(["count", "first_seen"], ascending=[False, True], kind="stable", ignore_index=True)
