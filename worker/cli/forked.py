"""A worker process forked from the supervisor, after it imported the kinds.

A child started as ``python -m worker`` imports Python, redis-py, the worker
and the application's kinds all over again (0.15-0.3 s here, more on a busy
machine), so two processes started later than one. Forked, a child starts
from the supervisor's memory: it only connects and reads. The supervisor
watches it through :class:`ForkedChild`, which answers as much of
``subprocess.Popen`` as the supervisor asks (poll, wait, send_signal, kill,
pid, returncode).

The supervisor forks before it starts any event loop, and only threads that
hold no lock the child needs run beside it (the metrics endpoint's; logging
re-creates its locks at a fork).
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from worker.cli.exits import EXIT_FAILED, one_line_errors
from worker.embedded.servers import die_with_parent

#: How often :meth:`ForkedChild.wait` looks at the child while waiting.
POLL_S = 0.01


class ForkedChild:
    """A forked worker process, seen as a ``subprocess.Popen``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"worker process {self.pid}", timeout or 0.0)
            time.sleep(POLL_S)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def fork_worker(life: Callable[[], int]) -> ForkedChild:
    """Fork a process that runs ``life()`` (one worker, served by :mod:`worker.cli.serve`) and exits with
    its exit code, never returning into the supervisor's code. The supervisor passes ``life`` in, so that
    this module needs nothing of the serving side."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return ForkedChild(pid)
    code = EXIT_FAILED
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)  # the supervisor's handlers; the worker sets its own
        die_with_parent()
        code = one_line_errors(life)
    finally:
        # Exit as a process started on its own would (its atexit handlers run: logging's flush, an
        # application's), without unwinding into the supervisor's code below this frame.
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
