"""Two processes replay the same 1,000 dead entries at once (opslib.replay, one in
order and one in a shuffled order, so that they meet entry by entry): exactly 1,000
jobs are re-added, each dead entry once."""

from __future__ import annotations

from pathlib import Path

import redis

from tests.faults.helpers import add_dead
from tests.helpers import replay_at_once
from worker.store.keys import Keys

DEAD = 1_000


def test_two_processes_replaying_the_same_dead_entries_re_add_each_once(
    r: redis.Redis, keys: Keys, prefix: str, redis_url: str, tmp_path: Path
) -> None:
    dead_ids = add_dead(r, keys, DEAD)
    results = replay_at_once(r, redis_url, prefix, dead_ids, ("forward", "shuffled"), tmp_path)
    counts = [result["counts"] for result in results]
    replayed = [c.get("replayed", 0) for c in counts]
    assert sum(replayed) == DEAD, f"replayed {replayed}"
    assert [c.get("missing", 0) for c in counts] == [DEAD - n for n in replayed]
    assert r.xlen(keys.jobs) == DEAD
    assert r.xlen(keys.dead) == 0
    entries = r.xrange(keys.jobs)
    assert sorted(fields[b"replay_of"].decode() for _, fields in entries) == sorted(dead_ids)
    assert {fields[b"job_id"].decode() for _, fields in entries} == {f"d{i}" for i in range(DEAD)}
    assert all(fields[b"attempts"] == b"0" for _, fields in entries)
    print(f"\nreplay race figures: {DEAD} dead entries, replayed {replayed[0]} + {replayed[1]} = {sum(replayed)}")
