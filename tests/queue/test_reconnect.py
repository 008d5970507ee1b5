"""What counts as a lost connection: the errors a chore rides out with backoff instead of a traceback."""

from __future__ import annotations

import asyncio

import pytest
import redis.exceptions

from worker.loop.partition_reader import read_error
from worker.store.reconnect import backoff_s, lost_connection, unless_lost, with_backoff
from worker.store.refusals import passes

CLOSED = "unable to perform operation on <TCPTransport closed=True reading=False 0x5564>; the handler is closed"


@pytest.mark.parametrize(
    "exc",
    [
        redis.exceptions.ConnectionError("Connection closed by server."),
        redis.exceptions.TimeoutError("Timeout reading from socket"),
        ConnectionRefusedError(111, "Connection refused"),
        RuntimeError(CLOSED),  # uvloop, when a cluster pipeline writes to a node that has just gone
    ],
)
def test_connection_losses(exc: BaseException) -> None:
    assert lost_connection(exc)


@pytest.mark.parametrize(
    "exc",
    [RuntimeError("dictionary changed size during iteration"), redis.exceptions.ResponseError("ERR syntax error")],
)
def test_other_errors_are_not_losses(exc: BaseException) -> None:
    assert not lost_connection(exc)


def test_backoff_grows_to_its_cap() -> None:
    waits = [backoff_s(n, base_s=0.05, cap_s=5.0) for n in range(1, 12)]
    assert all(0.5 * min(5.0, 0.05 * 2**n) <= w <= min(5.0, 0.05 * 2**n) for n, w in enumerate(waits, start=1))
    assert max(waits) <= 5.0


def test_one_rule_for_a_lost_connection_everywhere() -> None:
    """The read loop, the episode's kept outcomes and the best-effort writes ask the same question: uvloop's
    closed transport after a reset is a lost connection for each (it killed the worker from the read loop and
    dropped outcomes in the episode when only the chores knew it)."""
    closed = RuntimeError(CLOSED)
    assert read_error(closed)
    assert passes(closed)
    with unless_lost():
        raise closed
    with pytest.raises(RuntimeError, match="dictionary"), unless_lost(redis.exceptions.LockError):
        raise RuntimeError("dictionary changed size during iteration")


def test_with_backoff_rides_out_a_closed_transport() -> None:
    calls: list[int] = []

    async def call() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError(CLOSED)
        return "landed"

    assert asyncio.run(with_backoff(call, base_s=0.001, cap_s=0.002)) == "landed"
    assert len(calls) == 3
