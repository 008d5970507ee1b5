"""What a benchmarked worker process reports about itself, the same for every system.

Every benchmark handler (ours and each peer's) calls :meth:`Probe.done` when a
job finishes, and :meth:`Probe.started` with the job's reference time (when it
was enqueued, or when it was due) when the figure is a latency. At the N-th job
(``PROBE_JOBS``) the probe writes what it saw to ``PROBE_FILE`` as JSON, and
with ``PROBE_EXIT=1`` ends the process at once: the peers have no burst mode,
so that is how their run ends; ours (``--burst``) exits by itself. Where
several processes share the jobs (ours with ``--processes N``), none knows
when the N-th job ends: with ``PROBE_AT_EXIT=1`` each process that ran jobs
writes what it saw to ``PROBE_FILE.<pid>`` as it exits, and the benchmark adds
them up.

Standard library only: it is imported by our worker and by the peers' scripts
(``benchmarks/peers``), which run in virtual environments of their own;
:func:`peer_main` is their common command line.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from collections.abc import Callable


def rss_kib() -> int:
    """This process's resident memory now, in KiB (from /proc/self/statm)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") // 1024


class Probe:
    """Counts finished jobs; records first/last finish times, delays and RSS checkpoints."""

    def __init__(self) -> None:
        self.path = os.environ.get("PROBE_FILE", "")
        self.target = int(os.environ.get("PROBE_JOBS", "0"))
        self.exit_at_target = os.environ.get("PROBE_EXIT") == "1"
        self.rss_every = int(os.environ.get("PROBE_RSS_EVERY", "0"))
        self.count = 0
        self.first = 0.0
        self.last = 0.0
        self.delays: list[float] = []
        self.rss: list[tuple[int, int]] = []
        self._lock = threading.Lock()
        if os.environ.get("PROBE_AT_EXIT") == "1":
            atexit.register(self._write_own)

    def started(self, reference_epoch: float) -> None:
        """A job started: record how long after ``reference_epoch`` (seconds)."""
        delay = time.time() - reference_epoch
        with self._lock:
            self.delays.append(delay)

    def done(self) -> None:
        """A job finished."""
        now = time.time()
        with self._lock:
            self.count += 1
            count = self.count
            if count == 1:
                self.first = now
            self.last = now
            if self.rss_every and count % self.rss_every == 0:
                self.rss.append((count, rss_kib()))
        if count == self.target:
            self._report()

    def _report(self) -> None:
        if self.path:
            self._write(self.path)
        if self.exit_at_target:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

    def _write_own(self) -> None:
        """At exit: this process's figures to ``PROBE_FILE.<pid>`` (a forked worker process shares the
        probe its supervisor imported, so the pid is read now)."""
        self._write(f"{self.path}.{os.getpid()}")

    def _write(self, path: str) -> None:
        if not self.count:
            return  # e.g. the supervisor of several worker processes, which imports the kinds but runs none
        data = {"count": self.count, "first": self.first, "last": self.last, "delays": self.delays, "rss": self.rss}
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)


PROBE = Probe()


def peer_main(enqueue: Callable[[str, int], None], work: Callable[[str], None]) -> None:
    """A peer script's command line: ``enqueue KIND N`` (prints jobs/s as JSON) or ``work KIND``.

    ``work`` runs the peer's worker until the probe ends the process at the
    N-th job (``PROBE_EXIT=1``); returning instead is a failure.
    """
    command, kind = sys.argv[1], sys.argv[2]
    if command == "enqueue":
        count = int(sys.argv[3])
        started = time.perf_counter()
        enqueue(kind, count)
        print(json.dumps({"rate": count / (time.perf_counter() - started)}))
        return
    work(kind)
    sys.exit(f"the {kind} worker returned before its probe saw {PROBE.target} jobs")
