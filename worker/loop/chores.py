"""Timed chores that run beside the consumer loop, each in its own task.

A chore is an async function called every ``interval_s`` (with jitter so a
fleet of workers does not move in lockstep). It may return a number of
seconds to sleep next instead (the promoter sleeps until the next retry is
due). An exception is logged and the chore carries on after a backoff: a
chore never takes the worker down (saq's ``upkeep``, Sidekiq's pollers). A
Redis that refuses writes or is away is said once per episode, not once per
run (:func:`run_chore`); a permission Redis refuses, or a setup error of
ours (a table not migrated), is one line naming what to do.
"""

from __future__ import annotations

import asyncio
import logging
import random

import redis.exceptions

from worker.app import Chore
from worker.errors import WorkerError
from worker.loop.episode import RETRY_CAP_S, Episode
from worker.store.reconnect import CONNECTION_ERRORS, backoff_s, lost_connection
from worker.store.refusals import describe_refusal, refusal_code
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


async def run_chore(chore: Chore, stopping: asyncio.Event, episode: Episode | None = None) -> None:
    """Run ``chore`` until ``stopping`` is set, surviving its errors with backoff.

    A write Redis refuses (``OOM``, ``MISCONF``, ...) joins ``episode``, which
    speaks for it once; a lost connection and any other Redis error are said
    once, when the chore first fails, and once when it works again; another
    exception is logged with its traceback every time.
    """
    failures = 0
    for_episode = f"chore {chore.name}"
    while not stopping.is_set():
        try:
            next_s = await chore.run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failures += 1
            next_s = _failed(chore, exc, failures, episode, for_episode)
        else:
            if episode is not None and for_episode in episode.troubles:
                episode.accepted(for_episode)
            elif failures:
                log.info("Chore %s is working again.", chore.name)
            failures = 0
        delay = chore.interval_s if next_s is None else next_s
        if await sleep_or_stop(jittered(delay, chore.jitter), stopping):
            return


def _failed(chore: Chore, exc: Exception, failures: int, episode: Episode | None, for_episode: str) -> float:
    """Say what stopped the chore (see :func:`run_chore`); the seconds until it runs again."""
    if isinstance(exc, redis.exceptions.NoPermissionError | WorkerError):
        if failures == 1:
            why = refused(exc, "worker") if isinstance(exc, redis.exceptions.NoPermissionError) else str(exc)
            log.error("Chore %s failed: %s; it will run again.", chore.name, why)
        return backoff_s(failures, base_s=chore.interval_s, cap_s=30.0)
    code = refusal_code(exc)
    if episode is not None and code not in (None, "timeout"):
        episode.refused(for_episode, exc)
        return backoff_s(failures, cap_s=RETRY_CAP_S)
    if lost_connection(exc):
        if failures == 1:
            log.warning("Chore %s lost its connection (%s); retrying with backoff.", chore.name, exc)
        return backoff_s(failures)
    if isinstance(exc, redis.exceptions.RedisError):
        if failures == 1:
            log.warning("Chore %s failed (%s); retrying with backoff.", chore.name, describe_refusal(exc))
        return backoff_s(failures)
    log.exception("Chore %s failed; it will run again.", chore.name)
    return backoff_s(failures, base_s=chore.interval_s, cap_s=30.0)
