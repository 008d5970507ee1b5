"""Text from outside (kind names, ids, field names, errors) made safe to print: :func:`printable`.

Whoever enqueues a job chooses its fields, and a handler's error may quote
anything. Written raw, such text drives a terminal (ESC and CSI sequences,
OSC window titles and clipboard writes, BEL, the 8-bit C1 forms), forges
lines (a newline inside a value), or reorders what a reader sees (the bidi
controls of "Trojan Source", zero-width characters hiding a difference).
Every printer (text and JSON logs, the opslib CLI, ``show()``'s text, the
HTML views) passes such text through one table, :data:`UNSAFE`, which shows
each of those characters as its Python escape (``\\x1b``, ``\\u202e``):
visible, inert, and the same in every place.
"""

from __future__ import annotations

from typing import TextIO, cast

#: C0 and C1 controls, DEL, the Unicode line and paragraph separators.
CONTROLS = (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029)
#: Bidi embeddings, overrides, isolates and marks (U+061C, U+200E/F, U+202A-E, U+2066-9).
BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
#: Zero-width and invisible format characters (ZWSP, ZWNJ, ZWJ, word joiner, invisible operators, BOM...).
INVISIBLE = (0x00AD, 0x180E, 0x200B, 0x200C, 0x200D, *range(0x2060, 0x2065), 0xFEFF)
UNSAFE = {code: ascii(chr(code))[1:-1] for code in (*CONTROLS, *BIDI, *INVISIBLE)}
"""Code point -> its visible escape (``\\n``, ``\\x1b``, ``\\u202e``), for :meth:`str.translate`."""
UNSAFE_KEEP_LINES = {code: escape for code, escape in UNSAFE.items() if code != 0x0A}
"""The same, a newline kept (a traceback's lines, a whole page of output)."""
JSON_UNSAFE = {code: f"\\u{code:04x}" for code in UNSAFE if code >= 0x7F}
"""For JSON text that ``json.dumps`` wrote with ``ensure_ascii=False``: what it leaves raw (DEL, C1, bidi,
invisible characters, U+2028/9), as JSON ``\\u`` escapes; the C0 controls it escapes already."""


def printable(text: str, *, lines: bool = False) -> str:
    """``text`` with every character of :data:`UNSAFE` shown as its escape; ``lines`` keeps the newlines."""
    return text.translate(UNSAFE_KEEP_LINES if lines else UNSAFE)


def json_printable(text: str) -> str:
    """A JSON document (``json.dumps(..., ensure_ascii=False)``) with :data:`JSON_UNSAFE` escaped: still the
    same JSON, and nothing in it drives a terminal or reorders a line."""
    return text.translate(JSON_UNSAFE)


class PrintableWriter:
    """A text stream that writes through :func:`printable` (newlines kept): the opslib CLI's stdout and
    stderr, so that no command can write a raw control to the operator's terminal, whatever it prints."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(printable(text, lines=True))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def __getattr__(self, name: str) -> object:
        return getattr(self.stream, name)


def printable_stream(stream: TextIO) -> TextIO:
    """``stream`` wrapped in a :class:`PrintableWriter`."""
    return cast(TextIO, PrintableWriter(stream))
