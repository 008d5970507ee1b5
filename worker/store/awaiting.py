"""Jobs waiting for a worker: recognised, read and counted in one place for ``opslib.kinds()``, health and the
metric ``<ns>_jobs_awaiting_worker``.

A worker that finds no live worker of an entry's named queue able to run its
kind or payload version hands it back into the queue's ``delayed`` for
:data:`WAIT_S`, with ``waiting_since`` set (:mod:`worker.loop.handback`), and
so again every :data:`WAIT_S` until one comes. Such a member is always due
within :data:`AHEAD_S`, so a bounded read of what is due that soon
(:func:`read_due_soon`: one ``ZRANGEBYSCORE ... LIMIT 0`` :data:`AWAITING_CAP`
a partition) finds every waiting job behind fewer than that many retries and
jobs for later, whatever the length of ``delayed``. Past the cap the count is a
lower bound, and each reader says "at least" (:attr:`Awaiting.capped`).
``opslib.kinds()`` reads all of ``delayed`` anyway (in pages, up to its own
cap) and recognises the waiting members with :func:`awaited` too.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from worker.store.versions import VERSION_FIELD, WAITING_SINCE_FIELD
from worker.store.wire import decode_member

#: How long an entry no live worker can run waits in ``delayed`` before a worker looks at it again.
WAIT_S = 5.0
#: A waiting member is due again within the hand-back's wait: a read this far ahead of now finds them all.
AHEAD_S = WAIT_S + 1
#: The most ``delayed`` members read per partition to count the waiting jobs (the count says "at least").
AWAITING_CAP = 1000
#: A top-level field of a member (compact JSON, :func:`worker.store.wire.encode_member`) follows "{" or ","
#: with a bare quote: inside a string every quote is escaped, so no payload value can look like one.
WAITING_MARK = re.compile(rb'[{,]"' + WAITING_SINCE_FIELD.encode() + rb'":')
KIND_VALUE = re.compile(rb'[{,]"kind":"([^"\\]*)"')
VERSION_KEY = re.compile(rb'[{,]"' + VERSION_FIELD.encode() + rb'":')
VERSION_VALUE = re.compile(rb'[{,]"' + VERSION_FIELD.encode() + rb'":"([^"\\]*)"')


def awaited(job: dict[str, str]) -> tuple[str, str] | None:
    """``(kind, version)`` of a ``delayed`` job handed back to wait for a worker (``version``: ``v``, "1" when
    absent); None for a retry or a job for later."""
    if WAITING_SINCE_FIELD not in job:
        return None
    return job.get("kind", ""), job.get(VERSION_FIELD, "1")


def read_due_soon(client: Any, delayed: str, now: float) -> Any:
    """``ZRANGEBYSCORE`` of the members of ``delayed`` due within :data:`AHEAD_S` of ``now`` (Redis's time),
    at most :data:`AWAITING_CAP`: sent through a client, or queued on a pipeline (sync or async)."""
    return client.zrangebyscore(delayed, "-inf", repr(now + AHEAD_S), start=0, num=AWAITING_CAP)


def member_awaited(member: bytes | str) -> tuple[str, str] | None:
    """:func:`awaited` of a ``delayed`` member as Redis returns it, read without decoding the JSON where the
    fields it needs are plain (about 1 us against 6 for ``json.loads``: the metrics holder reads up to
    :data:`AWAITING_CAP` members a partition every interval), decoded where they are not (an escape in
    the kind); a member that cannot be read (not UTF-8, or not JSON where it must be decoded) is none."""
    raw = member if isinstance(member, bytes) else member.encode()
    if not WAITING_MARK.search(raw):
        return None
    kind, version = KIND_VALUE.search(raw), VERSION_VALUE.search(raw)
    try:
        if kind is not None and (version is not None or not VERSION_KEY.search(raw)):
            return kind.group(1).decode(), version.group(1).decode() if version else "1"
        return awaited(decode_member(member))
    except ValueError:  # not UTF-8, not JSON
        return None


@dataclass(frozen=True)
class Awaiting:
    """The waiting jobs of one reading of ``queues``: ``counts`` per ``(queue, kind, version)``; ``capped``: the
    queues a partition's read of which reached :data:`AWAITING_CAP`, so their counts are lower bounds."""

    counts: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    capped: frozenset[str] = frozenset()
    queues: frozenset[str] = frozenset()


def count_awaiting(due: Iterable[Sequence[Any]], queues: Iterable[str]) -> Awaiting:
    """The waiting jobs among ``due`` (each partition's :func:`read_due_soon` reply) of ``queues`` (each
    partition's named queue, in step), each told by :func:`member_awaited`."""
    counts: Counter[tuple[str, str, str]] = Counter()
    capped, read = set(), set()
    for members, queue in zip(due, queues, strict=True):
        read.add(queue)
        if len(members) >= AWAITING_CAP:
            capped.add(queue)
        for member in members:
            found = member_awaited(member)
            if found is not None:
                counts[(queue, *found)] += 1
    return Awaiting(counts, frozenset(capped), frozenset(read))
