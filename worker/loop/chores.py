"""Timed chores that run beside the consumer loop, each in its own task.

A chore is an async function called every ``interval_s`` (with jitter so a
fleet of workers does not move in lockstep). It may return a number of
seconds to sleep next instead (the promoter sleeps until the next retry is
due). An exception is logged and the chore carries on after a backoff: a
chore never takes the worker down (saq's ``upkeep``, Sidekiq's pollers). A
permission Redis refuses, or a setup error of ours (a table not migrated), is
one line naming what to do.
"""

from __future__ import annotations

import asyncio
import logging
import random

import redis.exceptions

from worker.app import Chore
from worker.errors import WorkerError
from worker.store.reconnect import CONNECTION_ERRORS, backoff_s
from worker.store.roles import refused

log = logging.getLogger("worker.loop.chores")

__all__ = ["CONNECTION_ERRORS", "jittered", "run_chore", "sleep_or_stop"]


def jittered(interval_s: float, jitter: float) -> float:
    """``interval_s`` moved by up to ±``jitter`` of itself."""
    return interval_s * (1.0 + random.uniform(-jitter, jitter))


async def sleep_or_stop(seconds: float, stopping: asyncio.Event) -> bool:
    """Sleep ``seconds`` or until ``stopping`` is set; True when stopping."""
    if seconds <= 0:
        return stopping.is_set()
    try:
        await asyncio.wait_for(stopping.wait(), timeout=seconds)
    except TimeoutError:
        return False
    return True


async def run_chore(chore: Chore, stopping: asyncio.Event) -> None:
    """Run ``chore`` until ``stopping`` is set, logging and surviving its errors."""
    failures = 0
    while not stopping.is_set():
        try:
            next_s = await chore.run()
        except asyncio.CancelledError:
            raise
        except CONNECTION_ERRORS as exc:
            failures += 1
            if failures == 1:
                log.warning("Chore %s lost its connection (%s); retrying with backoff.", chore.name, exc)
            next_s = backoff_s(failures)
        except (redis.exceptions.NoPermissionError, WorkerError) as exc:
            failures += 1
            why = refused(exc, "worker") if isinstance(exc, redis.exceptions.NoPermissionError) else str(exc)
            log.error("Chore %s failed: %s; it will run again.", chore.name, why)
            next_s = backoff_s(failures, base_s=chore.interval_s, cap_s=30.0)
        except Exception:
            failures += 1
            log.exception("Chore %s failed; it will run again.", chore.name)
            next_s = backoff_s(failures, base_s=chore.interval_s, cap_s=30.0)
        else:
            if failures:
                log.info("Chore %s is working again.", chore.name)
            failures = 0
        delay = chore.interval_s if next_s is None else next_s
        if await sleep_or_stop(jittered(delay, chore.jitter), stopping):
            return
