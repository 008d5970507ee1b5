"""Unique keys seen from opslib: cancelling a job that waits (on ``jobs``, in ``delayed``) releases its key in
the same script; ``find(unique_key)`` names the holder; ``show()`` of a dead letter lists the key."""

from __future__ import annotations

import redis

import opslib
from worker.store.enqueue import enqueue
from worker.store.keys import GROUP, Keys
from worker.store.scripts import Scripts


def test_cancelling_a_waiting_job_releases_its_key(r: redis.Redis, keys: Keys) -> None:
    r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
    enqueue(r, "mail", {"order_id": 1}, unique_key="k1", job_id="j1", prefix=keys.prefix)
    enqueue(r, "mail", {"order_id": 2}, unique_key="k2", job_id="j2", delay_s=600, prefix=keys.prefix)
    assert r.exists(keys.unique("mail", "k1"), keys.unique("mail", "k2")) == 2
    done = opslib.cancel(["j1", "j2"], reason="test", client=r, prefix=keys.prefix)
    assert list(done["status"]) == ["removed", "removed"]
    assert not r.exists(keys.unique("mail", "k1"), keys.unique("mail", "k2"))
    assert enqueue(r, "mail", {}, unique_key="k1", prefix=keys.prefix) != ""
    assert r.xlen(keys.jobs) == 1


def test_cancel_delayed_releases_the_key(r: redis.Redis, keys: Keys) -> None:
    enqueue(r, "mail", {}, unique_key="later", job_id="d1", delay_s=600, prefix=keys.prefix)
    opslib.cancel_delayed(["d1"], reason="test", client=r, prefix=keys.prefix)
    assert r.zcard(keys.delayed) == 0 and not r.exists(keys.unique("mail", "later"))


def test_a_running_job_keeps_its_key_when_cancelled_until_its_worker_settles(r: redis.Redis, keys: Keys) -> None:
    r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
    enqueue(r, "mail", {}, unique_key="busy", job_id="b1", prefix=keys.prefix)
    r.xreadgroup(GROUP, "someone", {keys.jobs: ">"}, count=1)  # a worker holds it
    done = opslib.cancel(["b1"], reason="test", client=r, prefix=keys.prefix)
    assert list(done["status"]) == ["cancelled"] and r.exists(keys.unique("mail", "busy"))


def test_find_names_the_holder_of_a_key_and_show_lists_it(r: redis.Redis, keys: Keys) -> None:
    ref = enqueue(r, "render_tickets", {"order_id": 4471}, unique_key="order:4471", prefix=keys.prefix)
    found = opslib.find("order:4471", client=r, prefix=keys.prefix)
    assert list(found["where"]) == ["unique", "waiting"]
    holder, waiting = found.iloc[0], found.iloc[1]
    assert holder["kind"] == "render_tickets" and holder["id"] == ref == waiting["id"]
    assert holder["job_id"] == waiting["job_id"] and "settles" in holder["status"]
    r.xgroup_create(keys.jobs, GROUP, id="0")
    r.xreadgroup(GROUP, "seeder", {keys.jobs: ">"}, count=1)
    dead_id = Scripts(r, keys).bury(ref, {"error": "E: x", "reason": "exhausted"}, maxlen=100).decode()
    assert "order:4471" in repr(opslib.show(dead_id, archive=False, client=r, prefix=keys.prefix).fields.values())


def test_replay_and_discard_of_a_dead_unique_job_take_no_key(r: redis.Redis, keys: Keys) -> None:
    """Death released the key (bury.lua); a replay moves the same job back without taking it again and a
    discard has none to release, so a new job of the key is added beside the replayed one (docs/worker.md,
    "Unique jobs and idempotent enqueue")."""
    r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
    dead = []
    for job_id in ("r1", "d1"):
        ref = enqueue(r, "mail", {}, unique_key="order:9", job_id=job_id, prefix=keys.prefix)
        r.xreadgroup(GROUP, "seeder", {keys.jobs: ">"}, count=1)
        lock = keys.unique("mail", "order:9")
        dead.append(Scripts(r, keys).bury(ref, {"error": "E: x"}, maxlen=100, lock=lock).decode())
        assert not r.exists(keys.unique("mail", "order:9")), "death is terminal: the key is released"
    at = {"client": r, "prefix": keys.prefix}
    assert list(opslib.replay([dead[0]], reason="test", **at)["status"]) == ["replayed"]
    assert list(opslib.discard([dead[1]], reason="test", **at)["status"]) == ["discarded"]
    assert not r.exists(keys.unique("mail", "order:9")), "neither move takes the key"
    fresh = enqueue(r, "mail", {}, unique_key="order:9", prefix=keys.prefix)
    assert r.hget(keys.unique("mail", "order:9"), "ref").decode() == fresh
