"""Error signatures: the error text with its variable parts replaced, so one bug is one group.

Forty dead letters from one bug differ only in the values their errors
quote: ``SeatLabelInvalid: '14-C' is not ...`` and ``SeatLabelInvalid:
'7-A' is not ...``. :func:`signature` replaces quoted values with ``<str>``,
timestamps with ``<time>``, UUIDs and stream entry ids with ``<id>``, hex
runs with ``<hex>`` and numbers with ``<num>``, and folds whitespace, so both
read ``SeatLabelInvalid: <str> is not ...`` and form one group. A signature
is a fixed point (``signature(s) == s``). It is pasted into calls and
commands, so its control, bidi and zero-width characters are escapes
(:func:`worker.printable.printable`), never raw.

Pure functions, here in the queue core because the archiver writes each dead
entry's ``signature`` and ``error_type`` columns with them; opslib groups the
dead letters in Redis with the same functions, so both agree.
"""

from __future__ import annotations

import re

from worker.printable import printable

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
    folded = printable(" ".join(error[: MAX_SIGNATURE_CHARS * 4].split()))  # copied into commands: printable
    return _VARIABLE.sub(_placeholder, folded)[:MAX_SIGNATURE_CHARS].rstrip()


def error_type(error: str) -> str:
    """The exception name at the start of ``Type: message`` (``""`` when there is none)."""
    match = _ERROR_TYPE.match(error)
    return match.group(1) if match else ""
