"""A Redis user allowed only read commands can run every query, and gets a clear error from replay."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

import opslib
from benchmarks.fixtures import ensure_group
from tests.opslib.helpers import bury
from worker.store.enqueue import enqueue
from worker.store.keys import GROUP, Keys


@pytest.fixture
def reader(r: redis.Redis, keys: Keys) -> Iterator[redis.Redis]:
    """A client logged in as a user with only ``+@read`` on the test's keys (deleted afterwards)."""
    name, password = f"opslib-reader-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    r.acl_setuser(name, enabled=True, passwords=[f"+{password}"], keys=[f"{keys.prefix}*"], commands=["+@read"])
    kwargs = r.connection_pool.connection_kwargs
    client = redis.Redis(host=kwargs["host"], port=kwargs["port"], username=name, password=password)
    try:
        yield client
    finally:
        client.close()
        r.acl_deluser(name)


def test_a_read_only_user_can_query_but_not_replay(r: redis.Redis, keys: Keys, reader: redis.Redis) -> None:
    dead_id = bury(r, keys, {"kind": "seat_label", "seat": "14-C"}, {"error": "SeatLabelInvalid: '14-C' is bad"})
    ensure_group(r, keys)
    enqueue(r, "seat_label", {"seat": "1A"}, prefix=keys.prefix)
    r.xreadgroup(GROUP, "w1", {keys.jobs: ">"}, count=1)
    enqueue(r, "mailer", {"email": "a@b"}, delay_s=60, prefix=keys.prefix)
    at = {"client": reader, "prefix": keys.prefix}

    with pytest.raises(redis.exceptions.NoPermissionError):
        reader.xadd(keys.jobs, {"kind": "x"})  # the user really is read-only
    assert opslib.dead_letters(**at).index.tolist() == [dead_id]
    assert opslib.dead_letters("seat_label", limit=1, **at).index.tolist() == [dead_id]
    assert len(opslib.failure_groups(**at)) == 1
    assert len(opslib.pending(**at)) == 1
    assert len(opslib.pending_counts(**at)) == 1
    assert len(opslib.delayed(**at)) == 1
    assert opslib.queue_stats(**at).dead == 1
    assert opslib.replay_kind("seat_label", dry_run=True, **at)["status"].tolist() == ["would replay"]
    assert opslib.throughput(**at).empty  # no worker counted anything here
    assert opslib.find("1A", **at)["where"].tolist() == ["running"]
    assert opslib.find(dead_id, **at)["where"].tolist()[-1] == "dead"

    with pytest.raises(
        opslib.OpslibError, match=r"Redis refused to replay dead letters: .*replay needs a user that may run scripts"
    ):
        opslib.replay([dead_id], **at)
    with pytest.raises(opslib.OpslibError, match="Redis refused to replay dead letters"):
        opslib.replay_kind("seat_label", **at)
    assert r.xlen(keys.dead) == 1

    batch = opslib.replay([dead_id], client=r, prefix=keys.prefix).attrs["batch"]
    assert opslib.replay_status(batch, **at)["status"].tolist() == ["still queued"]
