"""A queue's partitions: their keys for the settings, and the count recorded on the queue.

``QUEUE_PARTITIONS`` is recorded on the queue (``<prefix>partitions``) by the
first worker that starts; a worker, ``python -m worker enqueue`` or opslib
whose count differs is refused in one line rather than leave partitions that
nobody reads. opslib and the CLI follow the recorded count whatever their own
setting says when they only read. A queue that predates partitions has no
record and one partition.
"""

from __future__ import annotations

from typing import Any

from worker.errors import SettingsError
from worker.settings import Settings
from worker.store.keys import Keys, queue_partitions


def partition_keys(settings: Settings) -> list[Keys]:
    """The keys of each partition for ``QUEUE_PREFIX`` and ``QUEUE_PARTITIONS``."""
    return keys_for(settings.prefix, settings.partitions)


def keys_for(prefix: str, count: int) -> list[Keys]:
    """:func:`worker.store.keys.queue_partitions`, with a bad prefix as a :class:`SettingsError`."""
    try:
        return queue_partitions(prefix, count)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None


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
    """At a worker's start: record ``QUEUE_PARTITIONS`` unless recorded, refuse a different one;
    return the partitions' keys."""
    parts = partition_keys(settings)
    key = parts[0].partitions
    await client.set(key, settings.partitions, nx=True)
    check_recorded(await client.get(key), settings.partitions, parts[0])
    return parts
