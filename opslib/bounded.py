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

A move looking for given jobs (cancel, run-now, a replay's check of its log)
must find them however long the set is, so it reads the whole structure, but
still a page a command: :func:`every_member` by ``ZSCAN`` (which returns every
member present from the first page to the last, where pages by rank could
skip one promoted meanwhile) and :func:`every_entry` by ``XRANGE`` pages.
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


def every_member(client: Any, key: str) -> Iterator[bytes]:
    """Every member of ``key``, about :data:`PAGE` a command (``ZSCAN``; a member may come twice), uncapped:
    for a move that must find given jobs wherever they are in the set."""
    cursor = None
    while cursor != 0:
        cursor, page = client.zscan(key, cursor or 0, count=PAGE)
        yield from (member for member, _score in page)


def every_entry(client: Any, stream: str) -> Iterator[tuple[Any, Any]]:
    """Every entry of ``stream``, :data:`PAGE` a command, uncapped (see :func:`every_member`)."""
    low = "-"
    while True:
        page = client.xrange(stream, low, "+", count=PAGE)
        yield from page
        if len(page) < PAGE:
            return
        low = f"({text(page[-1][0])}"
