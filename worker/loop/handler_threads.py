"""The threads plain (``def``) handlers run in: as many as the worker has slots, daemons, started on demand.

Why not ``concurrent.futures.ThreadPoolExecutor``: the interpreter joins its
threads at exit, so one handler that never returns kept a stopping worker
alive past ``SHUTDOWN_GRACE_S`` for as long as it ran (a 12 s render, a 1.5 s
grace: 12.06 s). These threads are daemons: a worker that has given back what
did not finish exits, and a hung handler's thread dies with it. Each thread
also notes when it starts a handler (:attr:`Attempt.started_at`), so a kind's
``timeout_s`` counts from the handler's start, never from a wait for a thread.

A slot holds its thread until the handler returns (:mod:`worker.loop.attempt`),
so there are never more handlers than threads and none waits for one.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from worker.job import Job
from worker.loop.attempt import Attempt

_Work = tuple[Callable[[Job], Any], Job, Attempt, contextvars.Context, asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


class HandlerThreads:
    """At most ``size`` daemon threads named ``job-N``, started as handlers need them."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._busy = 0

    def submit(self, handler: Callable[[Job], Any], job: Job, attempt: Attempt) -> asyncio.Future[Any]:
        """Run ``handler(job)`` in a thread, in a copy of the caller's context (the attempt's span goes with
        it, as ``asyncio.to_thread``); the future has its result or exception."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            self._busy += 1
            start = self._busy > len(self._threads) and len(self._threads) < self.size
            if start:
                thread = threading.Thread(target=self._serve, name=f"job-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
        if start:
            thread.start()
        self._work.put((handler, job, attempt, contextvars.copy_context(), loop, future))
        return future

    def _serve(self) -> None:
        while (work := self._work.get()) is not None:
            handler, job, attempt, context, loop, future = work
            attempt.started_at = time.monotonic()
            try:
                result = context.run(handler, job)
            except BaseException as exc:  # the handler's, handed to the loop as it is
                _hand_over(loop, future, None, exc)
            else:
                _hand_over(loop, future, result, None)
            finally:
                del work, handler, job, attempt, context, future
                with self._lock:
                    self._busy -= 1

    def shutdown(self) -> None:
        """Let idle threads end; a thread still in a handler is left to it (a daemon: it dies with the process)."""
        for _ in self._threads:
            self._work.put(None)


def _hand_over(
    loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], result: Any, exc: BaseException | None
) -> None:
    with contextlib.suppress(RuntimeError):  # the loop is closed: the worker left without this handler
        loop.call_soon_threadsafe(_settle, future, result, exc)


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.done():  # the attempt's task was cancelled while it waited
        return
    if exc is None:
        future.set_result(result)
    else:
        future.set_exception(exc)
