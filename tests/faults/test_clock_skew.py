"""Three workers with clocks skewed by -5, 0 and +5 s (libfaketime, from Debian's
``faketime`` package) run a 1 s schedule for at least 60 ticks: each tick is
enqueued exactly once, none is missed.

The three clocks also run 4 times faster than real time (``FAKETIME="+5s x4"``:
offset and speed; timers and sleeps are scaled alike), so 60 ticks of the
workers' time take about 15 s of the test's. Each tick lives in the workers'
time, where the skews hold: the processes start within milliseconds of each
other, so their offsets stay -5/0/+5 s give or take a few tens of milliseconds.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import subprocess
from collections import Counter
from datetime import datetime

import pytest
import redis

from tests.faults.kinds_faults import ticks_key
from tests.helpers import Workers, wait_for
from worker.store.keys import Keys

TICKS = 60
SPEED = 4
SKEWS = (-5, 0, 5)
KINDS = "tests.faults.kinds_schedule"
LIB_GLOB = "/usr/lib/*/faketime/libfaketime.so.1"


def libfaketime() -> str:
    """The libfaketime library: installed from Debian if missing and possible, else the test is skipped."""
    found = glob.glob(LIB_GLOB)
    if not found and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", "faketime"],
            capture_output=True,
            timeout=240,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
        found = glob.glob(LIB_GLOB)
    if not found:
        pytest.skip("libfaketime (Debian package faketime) is not installed and apt-get could not install it")
    return found[0]


def test_three_skewed_workers_enqueue_each_tick_exactly_once(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers
) -> None:
    lib = libfaketime()
    ticks = ticks_key(prefix)
    procs = [
        workers.start(
            KINDS,
            log_name=f"skew{skew:+d}.log",
            LD_PRELOAD=lib,
            FAKETIME=f"{skew:+d}s x{SPEED}",
            WORKER_NAME=f"skew{skew:+d}",
        )
        for skew in SKEWS
    ]
    wait_for(lambda: r.hlen(ticks) >= TICKS + 2, timeout_s=TICKS / SPEED + 60, what=f"{TICKS + 2} ticks")
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(30) == 0, workers.log(proc)[-2000:]
    workers.burst(KINDS)  # run the tick jobs still queued (burst mode runs no scheduler)

    counts = {k.decode(): int(v) for k, v in r.hgetall(ticks).items()}
    twice = {tick: n for tick, n in counts.items() if n != 1}
    assert not twice, f"ticks enqueued more than once: {twice}"
    seconds = sorted(int(datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()) for t in counts)
    missed = sorted(set(range(seconds[0], seconds[-1] + 1)) - set(seconds))
    assert not missed, f"ticks missed between the first and the last: {missed}"
    assert len(seconds) >= TICKS
    by_worker: Counter[int] = Counter()
    for proc, skew in zip(procs, SKEWS, strict=True):
        by_worker[skew] = len(re.findall(r"Scheduled fault_every_second", workers.log(proc)))
    assert sum(by_worker.values()) == len(seconds), "the workers' logs disagree with the ticks recorded"
    print(
        f"\nclock-skew figures: {len(seconds)} consecutive ticks, each enqueued once; "
        f"enqueued by the worker at -5 s: {by_worker[-5]}, 0 s: {by_worker[0]}, +5 s: {by_worker[5]}"
    )
