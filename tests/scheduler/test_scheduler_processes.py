"""Three real worker processes, clocks skewed by -5 s, 0 and +5 s with libfaketime,
a schedule every second: each tick is enqueued exactly once and none is missed,
also when the worker whose clock runs ahead stops midway and the others take over.
Ticks follow Redis's clock (:mod:`worker.store.server_clock`), so the worker ahead
no longer takes each tick first: any of the three may win a tick.

libfaketime comes from Debian (``apt-get install -y faketime``); the test
installs it when it can (as root) and is skipped, with the reason, when not.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import pytest

from tests.helpers import Workers, wait_for

KINDS = "tests.scheduler.kinds_ticks"
LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")


def libfaketime() -> Path:
    if not LIBFAKETIME.exists() and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "faketime"],
            capture_output=True,
            timeout=120,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
    if not LIBFAKETIME.exists():
        pytest.skip(f"libfaketime is not installed ({LIBFAKETIME}) and `apt-get install -y faketime` did not work")
    return LIBFAKETIME


def skewed(offset: str) -> dict[str, str]:
    return {
        "LD_PRELOAD": str(libfaketime()),
        "FAKETIME": offset,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",  # asyncio's timers keep real time
        "FAKETIME_NO_CACHE": "1",
    }


def epoch(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp())


def won_ticks(proc: subprocess.Popen[str]) -> list[int]:
    """The ticks this worker's scheduler enqueued (from its log)."""
    found = re.findall(r"Scheduled tick for (\S+?Z)", Workers.log(proc))
    return [epoch(t) for t in found]


def ticks_seen(log: Path) -> dict[str, set[str]]:
    """scheduled_for -> the job ids enqueued for it."""
    seen: dict[str, set[str]] = defaultdict(set)
    if log.exists():
        for line in log.read_text().splitlines():
            tick, job_id, _pid = line.split()
            seen[tick].add(job_id)
    return seen


@pytest.mark.timeout(90)
def test_three_skewed_workers_enqueue_every_tick_once(workers: Workers, tmp_path: Path) -> None:
    tick_log = tmp_path / "ticks.log"
    common = {"TICK_LOG": str(tick_log), "RECLAIM_INTERVAL_S": "30"}
    ahead = workers.start(KINDS, log_name="ahead.log", **common, **skewed("+5s"))
    workers.start(KINDS, log_name="on-time.log", **common)
    workers.start(KINDS, log_name="behind.log", **common, **skewed("-5s"))
    wait_for(
        lambda: all("started" in Workers.log(p) for p in workers.procs), timeout_s=30, what="three workers started"
    )
    started = time.time()
    wait_for(lambda: time.time() > started + 3, what="3 s of ticks with all three")
    ahead.send_signal(signal.SIGTERM)
    assert ahead.wait(30) == 0
    wait_for(lambda: time.time() > started + 11, what="8 s without the worker that ran ahead (5 s of it pre-empted)")
    for proc in workers.procs[1:]:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    workers.burst(KINDS, SCHEDULER="off", **common)  # run what was enqueued but not yet run

    seen = ticks_seen(tick_log)
    doubles = {tick: ids for tick, ids in seen.items() if len(ids) > 1}
    assert not doubles, f"ticks enqueued more than once: {doubles}"
    epochs = sorted(epoch(t) for t in seen)
    missing = sorted(set(range(epochs[0], epochs[-1] + 1)) - set(epochs))
    assert not missing, f"ticks never enqueued: {missing}"
    won = {p.log_path.name: won_ticks(p) for p in workers.procs[:3]}  # type: ignore[attr-defined]
    assert sum(len(w) for w in won.values()) == len(epochs)
    last_ahead = max(won["ahead.log"], default=epochs[0])
    # Someone took over after the worker that ran ahead stopped: the one on time, or (on a loaded machine, where
    # the one on time may lose every race) the one behind, whose ticks come 5 s late but still once each.
    later = [tick for name in ("on-time.log", "behind.log") for tick in won[name] if tick > last_ahead + 1]
    assert later, f"nobody took over after the leader stopped: {won}"
