"""Whose turn it is to be read: the served queues by weight (or in strict order), their partitions in turn.

A worker serving ``critical:6,default:3,bulk:1`` must give each queue its
weight's share of the jobs it STARTS, not of the reads it makes: Sidekiq's
weights pick which queue is fetched, so one queue of slow jobs or large
batches takes the slots (sidekiq#5741). Here every entry a read returns is
charged to its queue, and the next read goes to the queue with the least
charge per unit of weight among those not waiting (a deficit round-robin
over entries). Entries start in the order they were read (the read-ahead
buffer is first in, first out), so under saturation the shares of starts
follow the shares of entries read, whatever the batch sizes: a read of 20
``bulk`` entries is paid for by the next 180 entries read of the others. A
low-weight queue also reads ahead only its weight's share of the read-ahead
(at least :data:`MIN_SHARE` entries), so that its runs in the buffer stay short.

A queue found empty waits in a blocking read of its own
(:mod:`worker.loop.rotation`) and leaves the turn; its charge is kept level
with the queues being read meanwhile, so that it rejoins on an equal footing
instead of claiming every read until it has caught up on the time it had no
work. A low-weight queue with work is never starved: its charge per weight
grows slowest of all while it is not read, so its turn comes.

``WORKER_QUEUE_ORDER=strict``: the first queue of ``WORKER_QUEUES`` that is
not waiting is read, so a later queue is read only while every queue before
it has nothing ready (or waits for its read to return).

Within a queue, its partitions take turns as one queue's partitions always did.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

from worker.store.queues import DEFAULT_QUEUE, Served

#: A low-weight queue still reads ahead this many entries at a time (fewer reads cost more round trips).
MIN_SHARE = 32


class _Reader(Protocol):
    """What the turn asks of a partition reader: whether it waits in a read of its own (or rests)."""

    @property
    def waiting(self) -> object | None: ...


P = TypeVar("P", bound=_Reader)
"""A partition reader (:class:`worker.loop.partition_reader.PartitionReader`; a test's stand-in): the turn
reads its ``queue_name`` (absent: ``default``) and its ``waiting`` (a read of its own, or None)."""


class _Queue(Generic[P]):
    """One served queue in the turn: its partitions, the next of them, its weight and its charge."""

    def __init__(self, weight: int, parts: list[P]) -> None:
        self.weight = weight
        self.parts = parts
        self.next = 0
        self.charge = 0.0
        """Entries read for this queue, divided by its weight."""

    def peek(self) -> P | None:
        """A partition of the queue that is not waiting (None: all wait), without taking the turn."""
        return next((part for part in self.parts if part.waiting is None), None)

    def ready(self) -> P | None:
        """The queue's next partition in turn that is not waiting, advancing the turn (None: all wait)."""
        count = len(self.parts)
        for step in range(count):
            part = self.parts[(self.next + step) % count]
            if part.waiting is None:
                self.next = (self.next + step + 1) % count
                return part
        return None


class QueueTurn(Generic[P]):
    """The order in which a worker's partitions are read (see the module docstring)."""

    def __init__(self, parts: Sequence[P], served: Sequence[Served] = (), strict: bool = False) -> None:
        """``parts``: the partition readers (a part without a ``queue_name`` is in ``default``); ``served``: the
        queues and weights in ``WORKER_QUEUES`` order (none: each queue the parts name, weight 1)."""
        self.parts = list(parts)
        self.strict = strict
        names = [getattr(part, "queue_name", DEFAULT_QUEUE) for part in self.parts]
        order = served or [Served(name) for name in dict.fromkeys(names)]
        queues = [_Queue(q.weight, [p for p, n in zip(self.parts, names, strict=True) if n == q.name]) for q in order]
        self._queues = [queue for queue in queues if queue.parts]
        self._of = {id(part): queue for queue in self._queues for part in queue.parts}
        self._total = sum(queue.weight for queue in self._queues)

    def next(self) -> P | None:
        """The partition to read now (None: every partition waits in a read of its own or rests)."""
        if len(self._queues) == 1:  # one queue: its partitions in turn, as before named queues
            return self._queues[0].ready()
        ready = [(queue, part) for queue in self._queues if (part := queue.peek()) is not None]
        if not ready:
            return None
        if self.strict:
            chosen = ready[0][0]
        else:
            chosen = min(ready, key=lambda pair: pair[0].charge)[0]
            waiting = (queue for queue in self._queues if all(queue is not q for q, _p in ready))
            for queue in waiting:  # level with the queues being read: no burst when it rejoins
                queue.charge = max(queue.charge, chosen.charge)
        return chosen.ready()

    def share(self, part: P, ahead: int) -> int:
        """Of ``ahead`` entries to read beyond the free slots, how many ``part``'s queue reads: its weight's
        share (at least :data:`MIN_SHARE`), so that one read of a low-weight queue does not fill the buffer
        with a run of its entries that the others then wait behind (weighted order; all of them in strict
        order or with one queue)."""
        queue = self._of.get(id(part))
        if self.strict or queue is None or len(self._queues) == 1 or ahead <= 1:
            return ahead
        return max(min(ahead, MIN_SHARE), -(-ahead * queue.weight // self._total))

    def charge(self, part: P, entries: int) -> None:
        """``entries`` were read from ``part``: charge its queue."""
        queue = self._of.get(id(part))
        if queue is not None and entries:
            queue.charge += entries / queue.weight
