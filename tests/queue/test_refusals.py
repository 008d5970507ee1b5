"""Which errors mean "Redis refuses writes for now", and the episode that keeps a decided outcome until its move
lands: pure checks, without a server (the fault suite's tests/faults/test_redis_refuses.py runs the real thing)."""

from __future__ import annotations

import asyncio
import logging

import pytest
import redis.exceptions

from worker.errors import QueueRefused
from worker.loop.episode import Episode
from worker.store.refusals import describe_refusal, passes, refusal_code

OOM = redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'.", status_code="OOM")
MISCONF = redis.exceptions.ResponseError("MISCONF Valkey is configured to save RDB snapshots, but it's unable to")


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (OOM, "OOM"),
        (MISCONF, "MISCONF"),
        (
            redis.exceptions.ResponseError("Command # 1 (XADD jobs * kind a) of pipeline caused error: MISCONF x"),
            "MISCONF",
        ),
        (redis.exceptions.ResponseError("Command # 2 (HINCRBY) of pipeline caused error: ('MISCONF x',)"), "MISCONF"),
        (
            redis.exceptions.ReadOnlyError("You can't write against a read only replica.", status_code="READONLY"),
            "READONLY",
        ),
        (redis.exceptions.NoPermissionError("this user has no permissions", status_code="NOPERM"), "NOPERM"),
        (redis.exceptions.TimeoutError("Timeout reading from socket"), "timeout"),
        (QueueRefused("OOM", "Redis refuses writes (OOM: ...); the job was not enqueued"), "OOM"),
        (redis.exceptions.ConnectionError("Connection refused"), None),
        (redis.exceptions.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"), None),
        (ValueError("OOM"), None),
    ],
)
def test_refusal_codes(exc: BaseException, code: str | None) -> None:
    assert refusal_code(exc) == code


def test_what_passes_is_a_refusal_a_timeout_or_a_lost_connection() -> None:
    assert passes(OOM) and passes(MISCONF) and passes(redis.exceptions.ConnectionError("gone"))
    assert not passes(redis.exceptions.ResponseError("ERR Error running script: bug"))
    assert describe_refusal(OOM).startswith("OOM (out of memory")


class Move:
    """A move Redis refuses ``refusals`` times, then accepts."""

    def __init__(self, refusals: int, error: BaseException = OOM) -> None:
        self.refusals = refusals
        self.error = error
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.refusals:
            raise self.error
        return "landed"


def lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level and r.name == "worker"]


def test_a_refused_move_waits_and_lands_with_one_line_each_way(caplog: pytest.LogCaptureFixture) -> None:
    episode = Episode()
    first, second = Move(3), Move(1, MISCONF)
    seen: list[int] = []

    async def main() -> list[str]:
        async def watch() -> None:
            while not episode.waiting:
                await asyncio.sleep(0.001)
            seen.append(episode.waiting)

        watcher = asyncio.create_task(watch())
        landed = await asyncio.gather(episode.land("0/1-0", first), episode.land("0/2-0", second))
        await watcher
        return list(landed)

    with caplog.at_level(logging.INFO, logger="worker"):
        assert asyncio.run(asyncio.wait_for(main(), 20)) == ["landed", "landed"]
    assert first.calls == 4 and second.calls == 2
    assert seen and seen[0] >= 1 and episode.waiting == 0 and not episode.active
    [warning] = lines(caplog, logging.WARNING)
    assert warning.startswith("Redis refuses writes: OOM (out of memory")
    [info] = lines(caplog, logging.INFO)
    assert info.startswith("Redis accepts writes again after") and "(OOM): 2 outcomes waited" in info


def test_another_error_is_raised_at_once_and_starts_no_episode(caplog: pytest.LogCaptureFixture) -> None:
    episode = Episode()
    bug = Move(5, redis.exceptions.ResponseError("ERR Error running script: attempt to index a nil value"))
    with pytest.raises(redis.exceptions.ResponseError, match="nil value"):
        asyncio.run(episode.land("0/1-0", bug))
    assert bug.calls == 1 and not episode.active and not caplog.records


def test_a_stop_gives_up_waiting_without_an_end_line(caplog: pytest.LogCaptureFixture) -> None:
    episode = Episode()

    async def main() -> None:
        waiting = asyncio.create_task(episode.land("0/1-0", Move(10_000)))
        while not episode.waiting:
            await asyncio.sleep(0.001)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    with caplog.at_level(logging.INFO, logger="worker"):
        asyncio.run(asyncio.wait_for(main(), 10))
    assert episode.waiting == 0 and not episode.active
    assert len(lines(caplog, logging.WARNING)) == 1 and lines(caplog, logging.INFO) == []


def test_a_chore_refused_in_an_episode_ends_it_only_when_it_works_again(caplog: pytest.LogCaptureFixture) -> None:
    episode = Episode()
    with caplog.at_level(logging.INFO, logger="worker"):
        episode.refused("chore promote", OOM)
        episode.refused("chore heartbeat", OOM)
        episode.accepted("chore promote")
        assert episode.active and lines(caplog, logging.INFO) == []
        episode.accepted("chore heartbeat")
    assert not episode.active
    assert len(lines(caplog, logging.WARNING)) == 1 and len(lines(caplog, logging.INFO)) == 1
