"""The demo's rolling deploy: old and new workers of ``ask_feedback`` side by side, both payload versions enqueued,
nothing failed, nothing dead, no version-2 payload run by the old worker; the summary says what Redis holds."""

from __future__ import annotations

import json

import redis

from stagedoor.demo import DemoNight
from stagedoor.demo.feedback import runs_key
from stagedoor.demo.rollout import rollout_prefix, run_rollout
from worker.store.keys import GROUP, Keys


def test_the_rolling_deploy_runs_both_versions_on_old_and_new_workers_and_fails_nothing(
    db: str, redis_url: str, r: redis.Redis, keys: Keys
) -> None:
    with DemoNight(db, redis_url, prefix=keys.prefix) as demo:
        rollout = run_rollout(demo, r, per_version=30)
    prefix = rollout_prefix(keys.prefix)
    mine = Keys(prefix)
    runs = {k.decode(): json.loads(v) for k, v in r.hgetall(runs_key(prefix)).items()}
    assert set(runs) == {f"feedback-v{v}-{i}" for v in (1, 2) for i in range(30)}
    assert r.xlen(mine.dead) == 0 and r.zcard(mine.delayed) == 0
    assert r.xpending(mine.jobs, GROUP)["pending"] == 0
    by_old = {job_id for job_id, run in runs.items() if run["deploy"] == "old"}
    assert by_old and all(job_id.startswith("feedback-v1-") and runs[job_id]["v"] == "1" for job_id in by_old)
    assert len(by_old) < len(runs)  # the new worker ran the version-2 jobs (and perhaps version-1 ones)
    for job_id, run in runs.items():
        assert run["address"] == f"buyer{job_id.rsplit('-', 1)[1]}@example.com"
        assert run["deploy"] == "old" or run["v"] == "2"  # the new worker saw version-1 payloads upcast
    assert (rollout.failed, rollout.dead, rollout.v2_by_old) == (0, 0, 0)
    assert rollout.ran.get(("old", "1"), 0) == len(by_old)
    assert rollout.ran.get(("new", "2"), 0) == len(runs) - len(by_old)
    assert rollout.handed_back == sum(int(run["handed_back"]) for run in runs.values())
    assert rollout.summary().endswith("hand-backs; failed 0, dead 0.")
    assert r.hlen(runs_key(keys.prefix)) == 0  # the night's own prefix holds none of it
