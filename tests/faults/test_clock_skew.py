"""Three workers with clocks skewed by -5 s, 0 and +130 s (libfaketime, from Debian's
``faketime`` package) run a 1 s schedule for at least 20 ticks and delayed jobs due
over those seconds: each tick is enqueued exactly once, none is missed, no delayed job
starts before its run time, and the worker 130 s ahead says its clock is off.

Ticks, promotion and retries follow Redis's clock (:mod:`worker.store.server_clock`),
so each tick lives in Redis's time: a worker's wrong clock changes nothing but a warning
(a worker 130 s ahead enqueued 27 of 287 ticks twice, and ran delayed jobs up to 58 s
early, when each read its own clock).
"""

from __future__ import annotations

import re
import signal
from collections import Counter
from datetime import datetime

import redis

from tests.faults.kinds_faults import ticks_key
from tests.faults.kinds_schedule import starts_key
from tests.helpers import Workers, libfaketime, wait_for
from worker.store.keys import Keys
from worker.store.wire import encode_member

TICKS = 20
SKEWS = (-5, 0, 130)
DELAYED = 20
KINDS = "tests.faults.kinds_schedule"


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
            FAKETIME=f"{skew:+d}s",
            WORKER_NAME=f"skew{skew:+d}",
        )
        for skew in SKEWS
    ]
    now = r.time()[0]
    run_at = {f"later-{n}": now + 3 + n for n in range(DELAYED)}  # due one a second, in Redis's time
    for job_id, at in run_at.items():
        r.zadd(keys.delayed, {encode_member({"kind": "started_at", "job_id": job_id, "attempts": "0"}): at})
    wait_for(lambda: r.hlen(ticks) >= TICKS + 2, timeout_s=TICKS + 60, what=f"{TICKS + 2} ticks")
    wait_for(lambda: r.hlen(starts_key(prefix)) == DELAYED, timeout_s=60, what="every delayed job")
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
    starts = {k.decode(): float(v) for k, v in r.hgetall(starts_key(prefix)).items()}
    early = {job: round(run_at[job] - at, 3) for job, at in starts.items() if at < run_at[job]}
    assert not early, f"delayed jobs started before their run time (s early): {early}"
    latest_s = max(at - run_at[job] for job, at in starts.items())
    # The offset is measured halfway through a TIME round trip, so it reads +129.9 as often as +130.0.
    said = re.search(r"This machine's clock is \+1(29\.9|30\.\d) s off Redis's", workers.log(procs[2]))
    assert said, "the worker 130 s ahead did not say so"
    print(
        f"\nclock-skew figures: {len(seconds)} consecutive ticks, each enqueued once; enqueued by the worker at "
        f"-5 s: {by_worker[-5]}, 0 s: {by_worker[0]}, +130 s: {by_worker[130]}; {DELAYED} delayed jobs, none "
        f"early, the latest {latest_s:.2f} s after its run time"
    )
