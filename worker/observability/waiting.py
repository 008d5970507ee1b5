"""How long the oldest undelivered job has waited: the queue's latency, next to its lag.

The lag counts the entries of ``jobs`` no worker has read; this says how old
the oldest of them is: now minus the time in its entry id (the first entry
after the group's last-delivered id). 0 when none waits. Read by the metrics
chore (``<METRICS_NAMESPACE>_queue_oldest_waiting_seconds``) and ``opslib.queue_stats``
(``oldest_waiting_s``); one XRANGE of one entry.
"""

from __future__ import annotations

from typing import Any

from worker.store.wire import entry_epoch_s, text


def first_undelivered_range(last_delivered_id: str | None) -> tuple[str, str]:
    """The XRANGE bounds of the entries after ``last_delivered_id`` (None: no group yet, every entry)."""
    return ("-" if last_delivered_id is None else f"({last_delivered_id}", "+")


def waited_s(entries: list[Any], now: float) -> float:
    """Seconds the first of ``entries`` (an XRANGE reply) has waited at ``now``; 0.0 when there is none."""
    if not entries:
        return 0.0
    return max(0.0, now - entry_epoch_s(text(entries[0][0])))


def oldest_waiting_s(client: Any, jobs_key: str, last_delivered_id: str | None, now: float) -> float:
    """The wait of the oldest undelivered entry of ``jobs_key`` through a ``redis.Redis``."""
    low, high = first_undelivered_range(last_delivered_id)
    return waited_s(client.xrange(jobs_key, min=low, max=high, count=1), now)


async def oldest_waiting_s_async(client: Any, jobs_key: str, last_delivered_id: str | None, now: float) -> float:
    """:func:`oldest_waiting_s` through a ``redis.asyncio.Redis``."""
    low, high = first_undelivered_range(last_delivered_id)
    return waited_s(await client.xrange(jobs_key, min=low, max=high, count=1), now)
