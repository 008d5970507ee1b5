"""Two processes replay the same 1,000 dead entries at once (opslib.replay, one in
order and one in a shuffled order, so that they meet entry by entry): exactly 1,000
jobs are re-added, each dead entry once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import redis

from tests.helpers import ROOT, Workers, wait_for
from worker.keys import Keys

DEAD = 1_000
RUNNER = """
import json, os, random, sys
import redis
from opslib import replay
ids = json.loads(open(sys.argv[1]).read())
if sys.argv[2] == "shuffled":
    random.Random(6).shuffle(ids)
client = redis.Redis.from_url(os.environ["REDIS_URL"])
client.blpop([sys.argv[3]], timeout=60)
frame = replay(ids, client=client, prefix=os.environ["QUEUE_PREFIX"])
print(json.dumps(frame["status"].value_counts().to_dict()))
"""


def test_two_processes_replaying_the_same_dead_entries_re_add_each_once(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers, tmp_path: Path
) -> None:
    pipe = r.pipeline(transaction=False)
    for i in range(DEAD):
        pipe.xadd(
            keys.dead,
            {"kind": "record", "job_id": f"d{i}", "attempts": "1", "error": "ValueError: on purpose",
             "traceback": "", "reason": "exhausted", "failed_at": "2026-11-30T21:14:00.000Z", "worker": "w"},
        )  # fmt: skip
    dead_ids = [entry_id.decode() for entry_id in pipe.execute()]
    ids_file = tmp_path / "ids.json"
    ids_file.write_text(json.dumps(dead_ids))
    go = f"{prefix}fault:go"
    env = workers.env("tests.faults.fault_kinds")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RUNNER, str(ids_file), order, go],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for order in ("forward", "shuffled")
    ]
    try:
        wait_for(
            lambda: (
                sum(c.get("cmd") == "blpop" for c in r.client_list()) >= 2 or any(p.poll() is not None for p in procs)
            ),
            timeout_s=60,
            what="both replayers to wait for the start signal",
        )
        r.rpush(go, "go", "go")
        outputs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
    counts = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
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
