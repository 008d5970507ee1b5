"""One process replays and another discards the same 1,000 dead entries at once.

The entries were archived and ``jobs:dead`` trimmed to 500 of them, so half
are taken from the stream (the replay and discard scripts) and half from the
archive (``UPDATE ... WHERE status = 'dead'`` under the log lock). Each entry
ends replayed or discarded, never both, never neither: in Redis (re-added
once, or gone) and in the archive (its row's status), and every replayed
job's outcome reaches its row.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
import redis

from tests.faults.helpers import KINDS, add_dead
from tests.helpers import Workers, move_at_once
from worker.store.keys import Keys
from worker.store.scripts import Scripts

DEAD = 1_000
KEPT = 500


@pytest.mark.timeout(180)
def test_a_replay_and_a_discard_racing_leave_each_entry_in_exactly_one_state(
    r: redis.Redis, keys: Keys, prefix: str, redis_url: str, workers: Workers, archive_url: str, tmp_path: Path
) -> None:
    dead_ids = add_dead(r, keys, DEAD)
    workers.burst(KINDS)  # archives the 1,000
    assert Scripts(r, keys).trim_dead(KEPT, DEAD) == [DEAD - KEPT, 0]  # as the trim-dead chore would
    assert r.xlen(keys.dead) == KEPT

    replayer, discarder = move_at_once(
        r, redis_url, prefix, dead_ids, (("replay", "forward"), ("discard", "shuffled")), tmp_path
    )
    replayed, discarded = set(replayer["replayed"]), set(discarder["discarded"])
    assert not replayed & discarded, f"{len(replayed & discarded)} entries both replayed and discarded"
    assert replayed | discarded == set(dead_ids), f"{DEAD - len(replayed | discarded)} entries neither"
    assert r.xlen(keys.dead) == 0
    readded = [f[b"replay_of"].decode() for _, f in r.xrange(keys.jobs) if b"replay_of" in f]
    assert sorted(readded) == sorted(replayed)  # each replayed entry re-added once, no discarded one

    workers.burst(KINDS)  # runs the replayed jobs; the archiver applies the log
    with psycopg.connect(archive_url) as conn:
        rows = conn.execute(
            "SELECT dead_id, status, replay_outcome, discarded_by FROM dead_letters"
            " WHERE queue = %s AND dead_id = ANY(%s)",
            (prefix, dead_ids),
        ).fetchall()
    assert len(rows) == DEAD
    assert {dead_id for dead_id, status, _, _ in rows if status == "replayed"} == replayed
    assert {dead_id for dead_id, status, _, _ in rows if status == "discarded"} == discarded
    # Either side may win every entry (a race); whatever each took carries its outcome or its author.
    assert {outcome for _, status, outcome, _ in rows if status == "replayed"} == ({"succeeded"} if replayed else set())
    assert {by for _, status, _, by in rows if status == "discarded"} == ({"racer"} if discarded else set())
    in_stream = set(dead_ids[-KEPT:])
    print(
        f"\nreplay/discard race figures: {DEAD} dead entries ({KEPT} in jobs:dead, {DEAD - KEPT} only archived); "
        f"replayed {len(replayed)} ({len(replayed & in_stream)} from the stream), discarded {len(discarded)} "
        f"({len(discarded & in_stream)} from the stream); none both, none neither, in Redis and in the archive"
    )
