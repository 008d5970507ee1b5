"""``isolation="process"``: each attempt of a plain handler in a child process, killed when it will not stop.

A thread cannot be stopped from outside: a render stuck in a C extension
keeps its thread, and its slot, until it returns. A kind declared with
``@job_kind(..., isolation="process")`` runs each attempt in a child forked
from the worker (so it sees what the kinds module and the lifespans set up;
redis-py opens fresh connections in a child by itself, a psycopg pool must
not be shared). The slot's ``job`` thread waits for the child; once the
attempt has been told to stop (its timeout, a cancel, the shutdown:
:mod:`worker.loop.attempt`) for ``STOP_GRACE_S``, the child is killed
(SIGKILL). The child cannot see ``job.stopping`` (an event of the worker's
process): the kill is its stop.

What comes back is what a thread would give: the handler's return value, or
its exception with the child's traceback as its cause (as
``concurrent.futures.ProcessPoolExecutor`` does). A child that dies on its own
(an OOM kill, a segfault, ``os._exit``) is a failed attempt,
:class:`~worker.errors.JobKilled` naming the signal or exit code, never a dead
worker.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import signal
import time
import traceback
from collections.abc import Callable
from typing import Any

from worker.errors import JobKilled
from worker.job import Job
from worker.loop.attempt import Attempt

#: How often the waiting thread looks whether the attempt was told to stop (a result comes back at once).
LOOK_S = 0.05
_FORK = multiprocessing.get_context("fork")


class ChildTraceback(Exception):
    """The traceback of a handler's exception in its child process (the cause of the exception re-raised)."""

    def __str__(self) -> str:
        return str(self.args[0])


def in_child(handler: Callable[[Job], Any], stop_grace_s: float) -> Callable[[Job, Attempt], Any]:
    """A function for the slot's thread: run ``handler(job)`` in a child, return its result or raise its error."""

    def run(job: Job, attempt: Attempt) -> Any:
        receive, send = _FORK.Pipe(duplex=False)
        child = _FORK.Process(target=_child, args=(handler, job, send), name=f"job-{job.kind}", daemon=True)
        child.start()
        send.close()
        try:
            return _wait(child, receive, attempt, stop_grace_s)
        finally:
            receive.close()
            if child.is_alive():
                child.kill()
            child.join()

    return run


def _wait(child: Any, receive: Any, attempt: Attempt, stop_grace_s: float) -> Any:
    while True:
        ready = multiprocessing.connection.wait([receive, child.sentinel], timeout=LOOK_S)
        if receive in ready:
            try:
                ok, value, child_traceback = receive.recv()
            except EOFError:  # it died between its last word and its result
                ready = [child.sentinel]
            else:
                if ok:
                    return value
                value.__cause__ = ChildTraceback(child_traceback)
                raise value
        if child.sentinel in ready:
            child.join()
            raise JobKilled(f"{attempt.job.kind}'s process {_death(child.exitcode)} before it finished")
        if attempt.reason is not None and time.monotonic() - attempt.stopped_at >= stop_grace_s:
            child.kill()
            child.join()
            raise JobKilled(f"{attempt.job.kind}'s process was killed after STOP_GRACE_S={stop_grace_s:g} s")


def _death(code: int | None) -> str:
    """``was killed by SIGKILL`` / ``exited with code 3``."""
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _child(handler: Callable[[Job], Any], job: Job, send: Any) -> None:
    """In the child: run the handler, send (ok, value, traceback text) back."""
    try:
        result = handler(job)
    except BaseException as exc:  # the handler's, sent back as it is
        text = "".join(traceback.format_exception(exc))
        try:
            send.send((False, exc, text))
        except Exception:  # not picklable: its type and message
            send.send((False, RuntimeError(f"{type(exc).__name__}: {exc}"), text))
    else:
        try:
            send.send((True, result, ""))
        except Exception as exc:
            send.send((False, RuntimeError(f"the handler's result cannot be sent back: {exc}"), ""))
    finally:
        send.close()
