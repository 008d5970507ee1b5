"""The enqueue API: one job or a batch in one round trip, and the job's identity (job_id or outbox_id)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import redis
import redis.asyncio as aioredis

from worker.errors import SettingsError
from worker.settings import Settings
from worker.store.enqueue import NewJob, enqueue, enqueue_many, enqueue_many_async, job_fields
from worker.store.keys import Keys


def fields_of(r: redis.Redis, stream: str) -> list[dict[str, str]]:
    return [{k.decode(): v.decode() for k, v in raw.items()} for _, raw in r.xrange(stream)]


def test_a_job_is_named_by_its_job_id_else_its_outbox_id_else_a_minted_one() -> None:
    assert job_fields("mail", {"job_id": "mine"})["job_id"] == "mine"
    relayed = job_fields("mail", {"outbox_id": "42"})
    assert relayed == {"kind": "mail", "outbox_id": "42", "attempts": "0"}  # no job_id beside it
    minted = job_fields("mail", {"job_id": ""})["job_id"]
    assert len(minted) == 32 and minted != job_fields("mail", None)["job_id"]


def test_a_batch_goes_in_one_pipeline_in_order(r: redis.Redis, keys: Keys) -> None:
    run_at = time.time() + 3600
    batch = [
        NewJob("mail", {"order_id": 7, "outbox_id": "1"}),
        NewJob("reminder", {"order_id": "9"}, run_at=run_at),
        NewJob("mail", {"job_id": "j3"}),
    ]
    first, member, third = enqueue_many(r, batch, prefix=keys.prefix)
    assert [entry_id.encode() for entry_id in (first, third)] == [entry_id for entry_id, _ in r.xrange(keys.jobs)]
    assert fields_of(r, keys.jobs) == [
        {"kind": "mail", "order_id": "7", "outbox_id": "1", "attempts": "0"},
        {"kind": "mail", "job_id": "j3", "attempts": "0"},
    ]
    assert r.zrange(keys.delayed, 0, -1, withscores=True) == [(member.encode(), pytest.approx(run_at))]
    assert json.loads(member)["order_id"] == "9"
    assert enqueue_many(r, [], prefix=keys.prefix) == []


def test_a_bad_job_in_a_batch_adds_none(r: redis.Redis, keys: Keys) -> None:
    with pytest.raises(ValueError, match="field 'seats' must be a string or a number"):
        enqueue_many(r, [NewJob("mail", {"order_id": 1}), NewJob("mail", {"seats": [1, 2]})], prefix=keys.prefix)  # type: ignore[dict-item]
    assert r.exists(keys.jobs) == 0


def test_the_async_batch_adds_what_enqueue_adds(r: redis.Redis, keys: Keys, redis_url: str) -> None:
    one = Keys(keys.prefix + "one:")
    enqueue(r, "mail", {"outbox_id": "5", "email": "a@example.com"}, prefix=one.prefix)
    enqueue(r, "mail", {"outbox_id": "6"}, run_at=4_000_000_000, prefix=one.prefix)

    async def add() -> list[str]:
        client = aioredis.Redis.from_url(redis_url)
        try:
            batch = [
                NewJob("mail", {"outbox_id": "5", "email": "a@example.com"}),
                NewJob("mail", {"outbox_id": "6"}, run_at=4_000_000_000),
            ]
            return await enqueue_many_async(client, batch, prefix=keys.prefix)
        finally:
            await client.aclose()

    _entry_id, member = asyncio.run(add())
    assert fields_of(r, keys.jobs) == fields_of(r, one.jobs)
    assert r.zrange(keys.delayed, 0, -1, withscores=True) == r.zrange(one.delayed, 0, -1, withscores=True)
    assert member == '{"attempts":"0","kind":"mail","outbox_id":"6"}'


def test_enqueue_reads_the_queue_settings_through_settings_and_only_those(
    r: redis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUEUE_PREFIX", prefix)
    monkeypatch.setenv("REDIS_MODE", "sideways")  # wrong, but not enqueue's business
    enqueue(r, "noop", {"job_id": "env-1"})
    assert [f[b"job_id"] for _, f in r.xrange(Keys(prefix).jobs)] == [b"env-1"]
    monkeypatch.setenv("QUEUE_PARTITIONS", "zero")
    with pytest.raises(SettingsError, match="QUEUE_PARTITIONS='zero'"):
        enqueue(r, "noop", {"job_id": "env-2"})


def test_the_queue_settings_are_parsed_once_and_again_when_they_change(
    r: redis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from worker.store.enqueue import _queue

    monkeypatch.setenv("QUEUE_PREFIX", prefix)
    before = _queue.cache_info().misses
    for n in range(5):
        enqueue(r, "noop", {"job_id": f"same-{n}"})
    assert _queue.cache_info().misses == before + 1  # read five times, parsed once
    monkeypatch.setenv("QUEUE_PREFIX", f"{prefix}other:")
    enqueue(r, "noop", {"job_id": "moved"})
    assert [f[b"job_id"] for _, f in r.xrange(Keys(f"{prefix}other:").jobs)] == [b"moved"]
    monkeypatch.setenv("MAX_JOB_BYTES", "lots")
    for _ in range(2):  # a bad value is refused every time, never kept
        with pytest.raises(SettingsError, match="MAX_JOB_BYTES='lots'"):
            enqueue(r, "noop", {"job_id": "refused"})
    r.delete(Keys(f"{prefix}other:").jobs)


def test_a_worker_name_given_is_told_from_the_host_pid_default() -> None:
    assert not Settings.from_env({}).worker_name_set
    assert Settings.from_env({"WORKER_NAME": "box-1"}).worker_name_set


def test_a_queue_setting_changed_or_removed_through_os_environ_is_seen_at_the_next_call(
    r: redis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUEUE_PREFIX", f"{prefix}é:")  # held as bytes by os.environ: read back as text
    big = {"job_id": "big", "note": "x" * 100}
    enqueue(r, "noop", big)
    monkeypatch.setenv("MAX_JOB_BYTES", "64")
    with pytest.raises(ValueError, match="over MAX_JOB_BYTES=64"):
        enqueue(r, "noop", big | {"job_id": "big2"})
    monkeypatch.delenv("MAX_JOB_BYTES")  # back to the default
    enqueue(r, "noop", big | {"job_id": "big2"})  # another id: the same id again would add nothing
    assert [f[b"job_id"] for _, f in r.xrange(Keys(f"{prefix}é:").jobs)] == [b"big", b"big2"]
    r.delete(Keys(f"{prefix}é:").jobs)
