"""Versioned payloads: upcasting chains, the stamped ``v``, the hand-back move, and rolling deploys with old
and new workers side by side (real worker processes on a real server)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import redis
import redis.asyncio as aioredis

import opslib
from tests.deploy.test_metrics import scrape
from tests.helpers import Workers, wait_for
from worker.embedded.servers import free_port
from worker.job import Job
from worker.kinds import Registry, RetryPolicy, job_kind
from worker.loop.handback import DEAD, HAND_BACK, RUN, WAIT, WAIT_S, HandBack, placement
from worker.loop.outcomes import Outcomes
from worker.loop.partition_reader import PartitionReader
from worker.observability.awaiting_gauge import read_awaiting_async
from worker.observability.metrics import Metrics
from worker.settings import Settings
from worker.store import wire
from worker.store.awaiting import Awaiting
from worker.store.enqueue import NewJob, enqueue, enqueue_many
from worker.store.keys import GROUP, Keys
from worker.store.scripts import Scripts
from worker.store.server_clock import CLOCK
from worker.store.wire import decode_member

OLD, NEW = "tests.queue.kinds_versions_old", "tests.queue.kinds_versions_new"
QUICK = {"WORKER_CONCURRENCY": "16", "BLOCK_MS": "100"}


def _stamped_handler(job: Job) -> None:
    """The handler of a kind this module registers process-wide at version 4 (never run)."""


job_kind("versions_test_stamped", version=4, upcast={1: dict, 2: dict, 3: dict})(_stamped_handler)


# ---------------------------------------------------------------- without a server


def test_a_chain_of_upcasters_turns_a_version_1_payload_into_version_3() -> None:
    registry = Registry()

    def one_to_two(fields: dict[str, str]) -> dict[str, str]:
        return {**{k: v for k, v in fields.items() if k != "email"}, "to": fields["email"]}

    def two_to_three(fields: dict[str, str]) -> dict[str, str]:
        name, _, domain = fields["to"].partition("@")
        return {**{k: v for k, v in fields.items() if k != "to"}, "to_name": name, "to_domain": domain}

    job_kind("mail", version=3, upcast={1: one_to_two, 2: two_to_three}, registry=registry)(_stamped_handler)
    spec = registry.get("mail")
    old = Job("mail", "j1", 0, "1-0", {"kind": "mail", "job_id": "j1", "attempts": "0", "email": "ada@example.org"})
    assert spec.upcasted(old, 1).fields == {
        "kind": "mail",
        "job_id": "j1",
        "attempts": "0",
        "to_name": "ada",
        "to_domain": "example.org",
        "v": "3",
    }
    middle = Job("mail", "j2", 1, "2-0", {"kind": "mail", "job_id": "j2", "attempts": "1", "to": "bo@x.io", "v": "2"})
    upcast = spec.upcasted(middle, 2)
    assert (upcast.attempts, upcast.entry_id, upcast.fields["to_name"], upcast.fields["v"]) == (1, "2-0", "bo", "3")


@pytest.mark.parametrize(
    ("version", "upcast", "says"),
    [
        (2, {}, "give {1: fn(1 -> 2)}"),
        (3, {1: dict}, "got versions [1]; give {1: fn(1 -> 2), 2: fn(2 -> 3)}"),
        (1, {1: dict}, "got versions [1]; give {none}"),
        (0, {}, "version must be an integer >= 1 (e.g. 2), got 0"),
    ],
)
def test_a_kind_declared_with_a_gap_in_its_upcasters_is_refused_in_one_line(
    version: int, upcast: dict[int, object], says: str
) -> None:
    with pytest.raises(ValueError, match="kind 'mail'") as raised:
        job_kind("mail", version=version, upcast=upcast, registry=Registry())  # type: ignore[arg-type]
    assert says in str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("version", "mine", "fleet", "awaited", "decision"),
    [
        (1, 2, {}, False, RUN),  # older: upcast here
        (2, 2, {}, False, RUN),
        (3, 2, {"k": 3}, False, HAND_BACK),  # newer, and a live worker runs it
        (3, 2, {"k": 2}, False, WAIT),  # newer, nobody runs it yet: wait, never dead
        (1, None, {"k": 1}, False, HAND_BACK),  # a kind this worker lacks, another runs
        (1, None, {}, True, WAIT),  # lacking, but awaited (declared recently, or stamped and within grace)
        (1, None, {}, False, DEAD),  # a kind nobody declares: unknown_kind, as before
    ],
)
def test_placement(version: int, mine: int | None, fleet: dict[str, int], awaited: bool, decision: str) -> None:
    assert placement("k", version, mine, fleet, awaited) == decision


# ---------------------------------------------------------------- against a server


def fields_of(r: redis.Redis, keys: Keys, entry: str) -> dict[bytes, bytes]:
    return r.xrange(keys.jobs, entry, entry)[0][1]


def test_enqueue_writes_v_given_or_registered_and_none_for_a_kind_it_does_not_declare(
    r: redis.Redis, keys: Keys
) -> None:
    assert fields_of(r, keys, enqueue(r, "send_email", {"to": "a@b"}, version=2, prefix=keys.prefix))[b"v"] == b"2"
    assert fields_of(r, keys, enqueue(r, "versions_test_stamped", prefix=keys.prefix))[b"v"] == b"4"
    assert b"v" not in fields_of(r, keys, enqueue(r, "not_declared_here", prefix=keys.prefix))
    [member] = enqueue_many(r, [NewJob("send_email", {"email": "a@b"}, delay_s=60, version=1)], prefix=keys.prefix)
    assert decode_member(member)["v"] == "1"
    with pytest.raises(ValueError, match=r"^version must be an integer >= 1 \(e.g. 2\), got 0$"):
        enqueue(r, "send_email", version=0, prefix=keys.prefix)


def test_a_hand_back_is_one_owner_checked_move_and_no_delivery(r: redis.Redis, keys: Keys) -> None:
    scripts = Scripts(r, keys)
    r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
    first = enqueue(r, "send_email", {"to": "a@b"}, version=2, prefix=keys.prefix)
    r.xreadgroup(GROUP, "old-1", {keys.jobs: ">"}, count=1)
    fields = {k.decode(): v.decode() for k, v in fields_of(r, keys, first).items()} | {"handed_back": "1"}
    assert scripts.hand_back(first, "old-2", None, fields) == 0  # not its entry: nothing changes
    assert r.xpending(keys.jobs, GROUP)["pending"] == 1
    copy = scripts.hand_back(first, "old-1", None, fields).decode()
    assert r.xrange(keys.jobs, first, first) == []
    assert r.xpending(keys.jobs, GROUP)["pending"] == 0
    [(read_id, read)] = r.xreadgroup(GROUP, "new-1", {keys.jobs: ">"}, count=10)[0][1]
    assert read_id.decode() == copy and read[b"handed_back"] == b"1" and read[b"v"] == b"2"
    [pending] = r.xpending_range(keys.jobs, GROUP, "-", "+", 10)
    assert pending["times_delivered"] == 1  # the copy's first delivery: the hand-back counted none
    assert scripts.hand_back(copy, "new-1", time.time() + 60, fields) == 1  # waiting: into delayed
    assert r.xlen(keys.jobs) == 0 and r.zcard(keys.delayed) == 1


def test_a_waiting_hand_back_is_due_by_redis_s_clock(
    redis_url: str, r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A payload no live worker can run waits WAIT_S in ``delayed``, counted on Redis's clock (the one promote
    compares with): a worker whose machine is 130 s ahead does not leave it there for 135 s."""
    registry = Registry()
    job_kind("versions_clock", registry=registry)(_stamped_handler)
    r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
    entry_id = r.xadd(keys.jobs, {"kind": "versions_clock", "job_id": "c1", "attempts": "0", "v": "2"}).decode()

    async def scenario() -> None:
        client = aioredis.Redis.from_url(redis_url)
        settings = Settings.from_env({"QUEUE_PREFIX": keys.prefix, "WORKER_NAME": "ahead"})
        outcomes = Outcomes(client, Scripts(client, keys), settings, (), promote_soon=lambda _s: None)
        reader = PartitionReader(client, outcomes, "ahead", block_ms=10)
        try:
            [(_got, raw)] = await reader.read(1, block=False)
            job = wire.parse_entry(entry_id, raw, registry.kinds, 1 << 20, 1 << 20)
            assert isinstance(job, wire.Job)
            real = time.time
            monkeypatch.setattr(time, "time", lambda: real() + 130)  # this machine's clock, 130 s ahead
            assert await CLOCK.measure(client) < -129  # as the heartbeat measures it
            assert await HandBack(None).fit(reader, registry.kinds["versions_clock"], job, raw) is None
        finally:
            monkeypatch.undo()
            CLOCK.offset_s = 0.0
            await client.aclose()

    asyncio.run(scenario())
    seconds, micros = r.time()
    [(member, due)] = r.zrange(keys.delayed, 0, -1, withscores=True)
    assert abs(due - (seconds + micros / 1e6 + WAIT_S)) < 2, "the hand-back's wait followed this machine's clock"
    assert abs(float(decode_member(member)["waiting_since"]) - (seconds + micros / 1e6)) < 2


def test_a_job_that_waited_and_then_failed_is_retried_without_waiting_since_so_it_is_not_awaiting(
    redis_url: str, r: redis.Redis, keys: Keys
) -> None:
    """Once a worker ran a job handed back to wait, its retry waits for its time, not for a worker: counted as
    delayed, never as awaiting (by ``opslib.kinds()``, health's read or the gauge)."""
    registry = Registry()
    job_kind("versions_retry", registry=registry, retry=RetryPolicy(retries=2, base_s=0.1, cap_s=0.2))(_stamped_handler)
    r.xgroup_create(keys.jobs, GROUP, id="0", mkstream=True)
    promoted = {"kind": "versions_retry", "job_id": "w1", "attempts": "0", "handed_back": "3", "waiting_since": "1.0"}
    entry_id = r.xadd(keys.jobs, promoted).decode()  # a waiting copy promoted onto jobs, for a worker that runs it

    async def scenario() -> Awaiting:
        client = aioredis.Redis.from_url(redis_url)
        settings = Settings.from_env({"QUEUE_PREFIX": keys.prefix, "WORKER_NAME": "new-1"})
        outcomes = Outcomes(client, Scripts(client, keys), settings, (), promote_soon=lambda _s: None)
        reader = PartitionReader(client, outcomes, "new-1", block_ms=10)
        try:
            [(_got, raw)] = await reader.read(1, block=False)
            job = wire.parse_entry(entry_id, raw, registry.kinds, 1 << 20, 1 << 20)
            assert isinstance(job, wire.Job)
            await outcomes.failed(registry.kinds["versions_retry"], job, RuntimeError("SMTP down"), 0.01)
            return await read_awaiting_async(client, [keys], float((await client.time())[0]))
        finally:
            await client.aclose()

    gauge = asyncio.run(scenario())
    [member] = r.zrange(keys.delayed, 0, -1)
    assert decode_member(member)["attempts"] == "1" and "waiting_since" not in decode_member(member)
    assert gauge.counts == {}
    table = opslib.kinds(client=r, prefix=keys.prefix)
    assert table.loc["versions_retry", ["delayed", "awaiting", "awaiting_versions"]].tolist() == [1, 0, ""]


def ran(r: redis.Redis, keys: Keys) -> dict[str, dict[str, str]]:
    return {k.decode(): json.loads(v) for k, v in r.hgetall(f"{keys.prefix}test:ran").items()}


def declared(r: redis.Redis, keys: Keys, count: int) -> bool:
    return len(r.keys(f"{keys.prefix}kinds:*")) >= count


def test_a_rollout_with_old_and_new_workers_half_and_half_fails_nothing(
    r: redis.Redis, keys: Keys, workers: Workers
) -> None:
    for n in range(4):
        workers.start(OLD if n % 2 else NEW, **QUICK)
    wait_for(lambda: declared(r, keys, 4), 30, "four workers declaring their kinds")
    jobs = [NewJob("send_email", {"email": f"u{i}@old.example", "job_id": f"old-{i}"}, version=1) for i in range(1500)]
    jobs += [NewJob("send_email", {"to": f"u{i}@new.example", "job_id": f"new-{i}"}, version=2) for i in range(1500)]
    jobs += [NewJob("send_sms", {"phone": f"+4420{i:07d}", "job_id": f"sms-{i}"}, version=1) for i in range(200)]
    enqueue_many(r, jobs, prefix=keys.prefix)
    ids = [str(job.fields["job_id"]) for job in jobs if job.fields]
    wait_for(lambda: len(ran(r, keys)) >= len(ids), 60, f"{len(ids)} jobs run")
    done = ran(r, keys)
    assert set(done) == set(ids)
    assert r.xlen(keys.dead) == 0
    new_payloads = ids[1500:]
    assert {done[job_id]["worker"] for job_id in new_payloads} == {"new"}  # no new payload ran on an old worker
    assert {done[job_id]["v"] for job_id in ids[:1500] if done[job_id]["worker"] == "new"} <= {"2"}  # upcast
    assert all(done[job_id]["address"] == f"u{i}@old.example" for i, job_id in enumerate(ids[:1500]))
    handed = sorted(int(done[job_id]["handed_back"]) for job_id in new_payloads)
    # A copy goes back to whichever worker reads next; an old worker handing back a copy that came round
    # already rests from reading, so each copy reaches a new worker within a few hand-backs.
    print(f"hand-backs of new payloads: mean {sum(handed) / len(handed):.2f}, max {handed[-1]}, tail {handed[-10:]}")
    assert sum(handed) / len(handed) < 3, (sum(handed) / len(handed), handed[-20:])
    assert handed[-1] <= 5, handed[-20:]
    wait_for(lambda: r.xpending(keys.jobs, GROUP)["pending"] == 0, 10, "every entry acknowledged")


def awaiting_series(port: int) -> dict[tuple[str, str, str], float] | None:
    """The worker's ``worker_jobs_awaiting_worker`` series, (queue, kind, version) -> jobs; None before the
    worker reads the queue as the metrics-lock holder (its ``_capped`` series comes with every reading)."""
    samples = scrape(port) or {}
    if not any(name == "worker_jobs_awaiting_worker_capped" for name, _labels in samples):
        return None
    return {
        (labels["queue"], labels["kind"], labels["version"]): value
        for (name, pairs), value in samples.items()
        if name == "worker_jobs_awaiting_worker" and (labels := dict(pairs))
    }


def test_with_only_old_workers_new_payloads_and_kinds_wait_then_run_when_a_new_worker_comes(
    r: redis.Redis, keys: Keys, workers: Workers
) -> None:
    port = free_port()
    workers.start(OLD, METRICS_PORT=str(port), METRICS_HOST="127.0.0.1", METRICS_INTERVAL_S="0.2", **QUICK)
    wait_for(lambda: declared(r, keys, 1), 30, "the old worker declaring its kinds")
    ids = [f"n{i}" for i in range(20)]
    for job_id in ids:
        enqueue(r, "send_email", {"to": f"{job_id}@x", "job_id": job_id}, version=2, prefix=keys.prefix)
    enqueue(r, "send_sms", {"phone": "+44", "job_id": "sms"}, version=1, prefix=keys.prefix)  # a kind it lacks
    ids.append("sms")

    def waiting(at_least: int) -> bool:
        members = [decode_member(m) for m in r.zrange(keys.delayed, 0, -1)]
        return len(members) == len(ids) and all(int(m["handed_back"]) >= at_least for m in members)

    wait_for(lambda: waiting(2), 30, "every job handed back to wait, twice")  # they keep waiting
    assert r.xlen(keys.dead) == 0 and ran(r, keys) == {}
    table = opslib.kinds(client=r, prefix=keys.prefix)
    assert table.loc["send_email", ["version", "awaiting", "awaiting_versions"]].tolist() == [1, 20, "v2: 20"]
    assert table.loc["send_sms", ["workers", "awaiting", "awaiting_versions"]].tolist() == [0, 1, "v1: 1"]
    # The old worker holds the metrics lock: a kind it lacks is "other" there (bounded label values).
    waits = {("default", "send_email", "2"): 20.0, ("default", "other", "1"): 1.0}
    wait_for(lambda: awaiting_series(port) == waits, 30, f"the gauge saying {waits}")
    workers.start(NEW, **QUICK)
    wait_for(lambda: len(ran(r, keys)) == len(ids), 30, "the new worker running them")
    assert {record["worker"] for record in ran(r, keys).values()} == {"new"}
    assert r.xlen(keys.dead) == 0
    wait_for(lambda: awaiting_series(port) == {}, 30, "the gauge's series gone with the jobs")


def test_a_job_delayed_before_the_deploy_runs_after_it_through_the_upcaster(
    r: redis.Redis, keys: Keys, workers: Workers
) -> None:
    member = enqueue(r, "send_email", {"email": "late@old.example"}, delay_s=0.5, version=1, prefix=keys.prefix)
    job_id = decode_member(member)["job_id"]
    workers.start(NEW, **QUICK)
    wait_for(lambda: job_id in ran(r, keys), 30, "the delayed version-1 job run")
    assert ran(r, keys)[job_id] == {"worker": "new", "v": "2", "address": "late@old.example", "handed_back": "0"}
    assert r.xlen(keys.dead) == 0


def test_hand_backs_are_counted_by_queue_kind_and_where_they_went() -> None:
    registry = Registry()
    job_kind("send_email", registry=registry)(_stamped_handler)
    metrics = Metrics(Settings.from_env({"QUEUE_PREFIX": "m:"}), aioredis.Redis(), registry)
    for kind, waiting, queue in (
        ("send_email", True, "default"),
        ("send_email", True, "default"),
        ("send_email", False, "default"),
        ("send_email", True, "bulk"),
        ("typo", False, "default"),
    ):
        metrics.job_handed_back(kind, waiting, queue)

    def count(queue: str, kind: str, to: str) -> float | None:
        labels = {"queue": queue, "kind": kind, "to": to}
        return metrics.registry.get_sample_value("worker_jobs_handed_back_total", labels)

    assert (count("default", "send_email", "wait"), count("bulk", "send_email", "wait")) == (2, 1)
    assert (count("default", "send_email", "worker"), count("default", "other", "worker")) == (1, 1)
    assert count("m:", "send_email", "wait") is None  # the named queue, not QUEUE_PREFIX, as the job series


def test_past_unknown_kind_grace_s_a_kind_nobody_declares_is_dead_lettered_as_unknown(
    r: redis.Redis, keys: Keys, workers: Workers
) -> None:
    workers.start(OLD, UNKNOWN_KIND_GRACE_S="1", **QUICK)
    wait_for(lambda: declared(r, keys, 1), 30, "the old worker declaring its kinds")
    enqueue(r, "send_fax", {"to": "+44", "job_id": "fax"}, version=1, prefix=keys.prefix)  # nobody declares it
    wait_for(lambda: r.zcard(keys.delayed) == 1, 30, "the job handed back to wait first (it carries v)")
    wait_for(lambda: r.xlen(keys.dead) == 1, 30, "the job dead-lettered once the grace is past")
    [(_id, dead)] = r.xrange(keys.dead)
    assert (dead[b"kind"], dead[b"reason"], dead[b"handed_back"]) == (b"send_fax", b"unknown_kind", b"1")
    assert r.zcard(keys.delayed) == 0 and ran(r, keys) == {}
