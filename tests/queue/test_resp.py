"""The read loop's own RESP: the packed command Redis parses, and an entry's flat fields as a dict."""

from __future__ import annotations

import pytest
import redis

from worker.loop.resp import pairs, resp_command


def test_a_packed_command_is_what_redis_parses(redis_url: str) -> None:
    """The packer's bytes, sent raw to a real server, are the command it names (ECHO of a multi-byte value)."""
    client = redis.Redis.from_url(redis_url)
    conn = client.connection_pool.get_connection()
    try:
        conn.send_packed_command([resp_command(("ECHO",), "zoë\r\n*1")])
        assert conn.read_response() == "zoë\r\n*1".encode()
    finally:
        client.connection_pool.release(conn)
        client.close()


def test_pairs_keeps_fields_in_order_and_refuses_an_odd_list() -> None:
    assert pairs([b"kind", b"noop", b"job_id", b"j1"]) == {b"kind": b"noop", b"job_id": b"j1"}
    assert list(pairs([b"b", b"1", b"a", b"2"])) == [b"b", b"a"]
    assert pairs([]) == {}
    with pytest.raises(ValueError, match="even length, got 3"):
        pairs([b"kind", b"noop", b"job_id"])
