"""What counts as a lost connection: the errors a chore rides out with backoff instead of a traceback."""

from __future__ import annotations

import pytest
import redis.exceptions

from worker.store.reconnect import backoff_s, lost_connection

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
