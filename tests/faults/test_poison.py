"""A handler that kills its process (os._exit) on one entry among 50: that entry runs
exactly 3 times, is dead-lettered as poison after exactly 3 deliveries, and the 49
others all complete."""

from __future__ import annotations

import time

import redis

from tests.faults.helpers import FAST_RECLAIM, KINDS, enqueue_many
from tests.faults.kinds_faults import crashes_key, runs_key
from tests.helpers import Workers
from worker.store.enqueue import job_fields
from worker.store.keys import GROUP, Keys

INNOCENTS = 49
CRASH_EXIT = 70


def test_a_process_killer_is_poison_after_three_deliveries_and_the_rest_complete(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers
) -> None:
    innocents = enqueue_many(r, keys, "crash_if_marked", INNOCENTS // 2)
    r.xadd(keys.jobs, job_fields("crash_if_marked", {"job_id": "killer", "crash": "yes"}))
    innocents += [f"late{i}" for i in range(INNOCENTS - len(innocents))]
    for job_id in innocents[INNOCENTS // 2 :]:
        r.xadd(keys.jobs, job_fields("crash_if_marked", {"job_id": job_id}))

    started = time.monotonic()
    exits = []
    for _ in range(6):  # a worker per life: the crasher may take three of them
        proc = workers.start(KINDS, "--burst", **FAST_RECLAIM)
        exits.append(proc.wait(60))
        if exits[-1] == 0:
            break
    elapsed = time.monotonic() - started

    assert exits == [CRASH_EXIT, CRASH_EXIT, CRASH_EXIT, 0], f"worker exit codes {exits}"
    assert int(r.get(crashes_key(prefix))) == 3, "the killer ran other than exactly 3 times"
    dead = r.xrange(keys.dead)
    assert len(dead) == 1
    fields = {k.decode(): v.decode() for k, v in dead[0][1].items()}
    assert fields["job_id"] == "killer"
    assert fields["reason"] == "poison"
    assert fields["attempts"] == "3"
    assert "delivered 3 times" in fields["error"]
    counts = {k.decode(): int(v) for k, v in r.hgetall(runs_key(prefix)).items()}
    assert set(counts) == set(innocents), "an innocent job did not complete"
    assert r.xpending(keys.jobs, GROUP)["pending"] == 0
    print(
        f"\npoison figures: killer ran 3 times in 3 worker lives (exits {exits}), dead-lettered as poison "
        f"with attempts 3; {len(counts)} innocents complete, {sum(counts.values()) - len(counts)} ran twice; "
        f"{elapsed:.1f} s"
    )
