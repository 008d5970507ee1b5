"""Reads of a stream or a sorted set in pages, up to a cap: no call blocks Redis more than a few ms.

A read of a whole structure costs Redis about 0.45 s per million entries in
one command, during which every worker waits; opslib reads :data:`PAGE`
entries a command (well under a millisecond each) and at most :data:`CAP` per
structure and call, so a read answers within a second whatever the backlog.
What was cut short is said: :class:`Scan` counts what was read, and its
:meth:`~Scan.note` (in the frame's ``attrs["notes"]``) names the structure,
how many were read and how many there are.

Pages of a sorted set are taken by rank: a member moved between two pages
(promoted, added) may be missed or seen twice; counts are of the moment each
page was read, which a busy queue changes anyway.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from worker.store.wire import text

PAGE = 1000
"""Entries a command reads."""
CAP = 20_000
"""Entries a call reads of one structure."""


@dataclass
class Scan:
    """What one capped read took of a structure: ``read`` entries, ``capped`` when it stopped at the cap."""

    what: str
    read: int = 0
    capped: bool = False

    def note(self, total: int | None) -> str:
        """One line saying what was counted (``total``: the structure's size, when Redis says it)."""
        of = f" of {total:,}" if total is not None else ""
        return f"{self.what}: counted the first {self.read:,}{of} (opslib reads at most {CAP:,} per structure)"


def stream_entries(client: Any, stream: str, scan: Scan, start: str = "-") -> Iterator[tuple[Any, Any]]:
    """The entries of ``stream`` from ``start`` on (inclusive; ``(id`` for after ``id``), paged, up to the cap."""
    low = start
    while scan.read < CAP:
        count = min(PAGE, CAP - scan.read)
        page = client.xrange(stream, low, "+", count=count)
        yield from page
        scan.read += len(page)
        if len(page) < count:
            return
        low = f"({text(page[-1][0])}"
    scan.capped = bool(client.xrange(stream, low, "+", count=1))


def zset_members(client: Any, key: str, scan: Scan, *, withscores: bool = False) -> Iterator[Any]:
    """The members of ``key`` (with ``withscores``, (member, score) pairs), lowest score first, paged by
    rank, up to the cap."""
    while scan.read < CAP:
        count = min(PAGE, CAP - scan.read)
        page = client.zrange(key, scan.read, scan.read + count - 1, withscores=withscores)
        yield from page
        scan.read += len(page)
        if len(page) < count:
            return
    scan.capped = client.zcard(key) > scan.read
