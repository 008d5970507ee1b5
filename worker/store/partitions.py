"""A queue's partitions: their keys for the settings, and the count recorded on the queue.

``QUEUE_PARTITIONS`` is recorded on the queue (``<prefix>partitions``) by the
first worker that starts; a worker, ``python -m worker enqueue`` or opslib
whose count differs is refused in one line rather than leave partitions that
nobody reads. opslib and the CLI follow the recorded count whatever their own
setting says when they only read. A queue that predates partitions has no
record and one partition.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from worker.errors import SettingsError
from worker.settings import Settings
from worker.store.keys import Keys, queue_partitions
from worker.store.queues import DEFAULT_QUEUE, checked_queue


def partition_keys(settings: Settings, queue: str = DEFAULT_QUEUE) -> list[Keys]:
    """The keys of each partition of ``queue`` for ``QUEUE_PREFIX`` and ``QUEUE_PARTITIONS``."""
    return keys_for(settings.prefix, settings.partitions, queue)


def served_keys(settings: Settings) -> list[Keys]:
    """The keys of each partition of each queue ``WORKER_QUEUES`` names, queue by queue in its order."""
    return [keys for served in settings.queues for keys in partition_keys(settings, served.name)]


def keys_for(prefix: str, count: int, queue: str = DEFAULT_QUEUE) -> list[Keys]:
    """:func:`worker.store.keys.queue_partitions`, with a bad prefix as a :class:`SettingsError`."""
    try:
        return queue_partitions(prefix, count, queue)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None


def queue_names(members: Iterable[bytes | str]) -> list[str]:
    """The queues in use from the ``queues`` set's members: ``default`` first, then the others by name (a
    member that is not a queue name, written by hand, is left out)."""
    names = {m.decode() if isinstance(m, bytes) else m for m in members}
    valid = {name for name in names if _is_queue_name(name)}
    return [DEFAULT_QUEUE, *sorted(valid - {DEFAULT_QUEUE})]


def known_queues(client: Any, prefix: str) -> list[str]:
    """The queues in use on ``prefix`` (sync client): ``default`` and every queue in ``queues``."""
    return queue_names(client.smembers(Keys(prefix).queues))


async def known_queues_async(client: Any, prefix: str) -> list[str]:
    """:func:`known_queues` on an asyncio client."""
    return queue_names(await client.smembers(Keys(prefix).queues))


def _is_queue_name(name: str) -> bool:
    try:
        checked_queue(name)
    except ValueError:
        return False
    return True


def check_recorded(recorded: Any, count: int, keys: Keys) -> None:
    """Refuse a count that differs from the one recorded on the queue (``recorded``: GET's reply)."""
    if recorded is None:
        return
    have = int(recorded)
    if have != count:
        raise SettingsError(
            f"the queue {keys.prefix or '(no prefix)'} has QUEUE_PARTITIONS={have} (recorded in {keys.partitions}) "
            f"but this process has QUEUE_PARTITIONS={count}; give every worker of a queue the same count "
            "(to change it, drain the queue first: see the Clusters section of docs/operations.md)"
        )


def recorded_count(client: Any, prefix: str) -> int | None:
    """The count recorded on the queue (sync client), or None when no worker has recorded one."""
    value = client.get(Keys(prefix).partitions)
    return None if value is None else int(value)


async def record_count(client: Any, settings: Settings) -> list[Keys]:
    """At a worker's start: record ``QUEUE_PARTITIONS`` unless recorded, refuse a different one, and add the
    named queues it serves to ``queues``; return the served partitions' keys."""
    parts = served_keys(settings)
    key = parts[0].partitions
    await client.set(key, settings.partitions, nx=True)
    check_recorded(await client.get(key), settings.partitions, parts[0])
    named = [served.name for served in settings.queues if served.name != DEFAULT_QUEUE]
    if named:
        await client.sadd(parts[0].queues, *named)
    return parts
