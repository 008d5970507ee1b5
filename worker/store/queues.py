"""Named queues: what a queue may be called, which queue a new job goes to, and a worker's served queues.

A queue separates work that must not wait in one line (the 03:00
reconciliation behind a sale's confirmation emails). The queue ``default``
keeps the original key names (``jobs``, ``delayed``, ``jobs:dead``); another
queue has the same names under ``q:<name>:`` (:class:`worker.store.keys.Keys`).

:data:`DECLARED_QUEUES` is, like :data:`worker.store.versions.DECLARED`, the
store's one view of the kinds: ``worker.kinds`` fills it as a kind declares
``queue=``, so that ``enqueue`` in a process that registers the kind sends the
job to the kind's queue without the caller naming it.

``WORKER_QUEUES`` (``critical:6,default:3,bulk:1``) says which queues a
worker serves and with what weight (:func:`parse_served`); how the read loop
honours the weights is :mod:`worker.loop.queue_turn`'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_QUEUE = "default"

#: A queue name: lowercase letters, digits, ``_`` and ``-``, starting with a letter or digit; no ``:`` or
#: braces, which would change the key layout or a cluster's hash slot.
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")

DECLARED_QUEUES: dict[str, str] = {}
"""The queue of each kind registered in this process with ``queue=`` (``worker.kinds`` writes it)."""


def checked_queue(name: object, what: str = "queue") -> str:
    """``name`` if it is a valid queue name; else ValueError of one line saying what would be right."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            f"{what} {name!r} is not a queue name; use 1-40 lowercase letters, digits, '_' or '-', "
            "starting with a letter or digit (e.g. 'bulk')"
        )
    return name


def queue_for(kind: str, queue: str | None) -> str:
    """The queue a new job of ``kind`` goes to: ``queue`` when given, else the kind's declared queue where
    this process registers the kind, else ``default``."""
    if queue is None:
        return DECLARED_QUEUES.get(kind, DEFAULT_QUEUE)
    return checked_queue(queue)


_NAMED_PREFIX = re.compile(r"q:([a-z0-9][a-z0-9_-]{0,39}):\Z")


def queue_of_prefix(queue_prefix: str | None) -> str:
    """The named queue whose keys start with ``queue_prefix`` (the archive's ``queue`` column,
    :attr:`worker.store.keys.Keys.queue_prefix`): the name after a final ``q:<name>:``, else ``default``."""
    found = _NAMED_PREFIX.search(queue_prefix or "")
    return found.group(1) if found else DEFAULT_QUEUE


@dataclass(frozen=True)
class Served:
    """A queue a worker serves and its weight (its share of starts under saturation is weight / total)."""

    name: str
    weight: int = 1


def parse_served(text: str) -> tuple[Served, ...]:
    """``WORKER_QUEUES``: ``name[:weight],...`` (no weight: 1; empty: ``default`` alone).

    Raises ValueError of one line for a bad name, a bad weight or a queue named twice.
    """
    text = text.strip()
    if not text:
        return (Served(DEFAULT_QUEUE),)
    served: list[Served] = []
    for item in text.split(","):
        name, _, weight = item.strip().partition(":")
        checked_queue(name.strip(), "WORKER_QUEUES: the queue")
        if weight and not (weight.strip().isdigit() and 1 <= int(weight) <= 1000):
            raise ValueError(
                f"WORKER_QUEUES: the weight {weight!r} of {name.strip()!r} must be a whole number from 1 to 1000 "
                "(e.g. critical:6,default:3,bulk:1)"
            )
        served.append(Served(name.strip(), int(weight) if weight else 1))
    names = [queue.name for queue in served]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"WORKER_QUEUES names {', '.join(twice)} twice; name each queue once (e.g. default:3,bulk:1)")
    return tuple(served)


def describe_served(served: tuple[Served, ...]) -> str:
    """The served queues as ``WORKER_QUEUES`` spells them (log lines, health)."""
    return ",".join(f"{queue.name}:{queue.weight}" for queue in served)
