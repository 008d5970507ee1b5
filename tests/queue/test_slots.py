"""The read loop and its slots, driven in-process: an in-memory partition stands in for a stream, so these
run without Redis in milliseconds. The real reads, acknowledgements and moves stay covered by the tests
that run a worker against a server (tests/queue/test_worker.py, tests/cluster, tests/faults)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest
import redis.exceptions

from worker.loop.read_ahead import ReadAhead
from worker.loop.rotation import Rotation
from worker.loop.slots import Entries, Raw, Slots

DEADLINE_S = 10.0


class MemoryPartition:
    """A partition held in memory: ``read`` pops up to ``count`` entries; a blocking read waits up to ``block_s``
    for one. ``fail_next`` makes the next reads raise (one error each)."""

    def __init__(self, index: int, entries: int = 0, block_s: float = 0.05) -> None:
        self.index = index
        self.stream = f"jobs-{index}"
        self.waiting: asyncio.Task[Entries] | None = None
        self.failures = 0
        self.block_s = block_s
        self.queue: list[tuple[str, Raw]] = []
        self.reads: list[tuple[int, bool]] = []
        self.fail_next: list[BaseException] = []
        self._added = asyncio.Event()
        self.added = 0
        self.add(entries)

    @property
    def where(self) -> str:
        return ""

    def add(self, count: int) -> None:
        for n in range(self.added, self.added + count):
            self.queue.append((f"{self.index}-{n}", {b"n": str(n).encode()}))
        self.added += count
        self._added.set()

    async def read(self, count: int, block: bool = True) -> Entries:
        self.reads.append((count, block))
        if self.fail_next:
            raise self.fail_next.pop(0)
        if not self.queue and block:
            self._added.clear()
            try:
                await asyncio.wait_for(self._added.wait(), self.block_s)
            except TimeoutError:
                return []
        taken, self.queue = self.queue[:count], self.queue[count:]
        return taken


class Runs:
    """The entries run, and what ran beside each when it started."""

    def __init__(self, job_s: float = 0.0) -> None:
        self.job_s = job_s
        self.slots: Slots | None = None
        self.running: set[str] = set()
        self.done: list[str] = []
        self.beside: dict[str, set[str]] = {}
        self.most = 0
        self.tasks: set[asyncio.Task[Any] | None] = set()

    async def __call__(self, part: Any, entry_id: str, raw: Raw, alone: bool) -> None:
        assert self.slots is not None
        self.tasks.add(asyncio.current_task())
        try:
            self.beside[entry_id] = set(self.running)
            self.running.add(entry_id)
            self.most = max(self.most, len(self.running))
            await asyncio.sleep(self.job_s)
            self.done.append(entry_id)
        finally:
            self.running.discard(entry_id)


def slots_for(capacity: int, runs: Runs) -> Slots:
    runs.slots = Slots(capacity, runs)
    return runs.slots


def drive(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    async def bounded() -> None:
        await asyncio.wait_for(main(), DEADLINE_S)

    asyncio.run(bounded())


def rotation(
    slots: Slots,
    parts: list[MemoryPartition],
    stopping: asyncio.Event,
    drained: Callable[[], Awaitable[bool]] | None = None,
    recreate_group: Callable[[], Awaitable[None]] | None = None,
    read_ahead: ReadAhead | None = None,
) -> Rotation:
    async def nothing() -> None:
        return None

    return Rotation(
        slots, parts, stopping, recreate_group=recreate_group or nothing, drained=drained, read_ahead=read_ahead
    )


def drained_when_empty(parts: list[MemoryPartition]) -> Callable[[], Awaitable[bool]]:
    async def drained() -> bool:
        return not any(part.queue for part in parts)

    return drained


def test_one_partition_reads_blocking_for_all_free_slots_and_never_overfills() -> None:
    runs = Runs(job_s=0.001)
    part = MemoryPartition(0, entries=50)

    async def main() -> None:
        slots = slots_for(8, runs)
        await rotation(slots, [part], asyncio.Event(), drained_when_empty([part])).consume()

    drive(main)
    assert sorted(runs.done) == sorted(f"0-{n}" for n in range(50))
    assert runs.most <= 8
    assert part.reads[0] == (8, True)  # the first read asks for every slot, in one blocking read
    assert all(block for _count, block in part.reads)  # one partition: every read blocks, none waits aside
    assert part.waiting is None


def test_several_partitions_take_turns_and_an_idle_one_waits_in_a_read_holding_one_slot() -> None:
    runs = Runs(job_s=0.002)
    busy, quiet = MemoryPartition(0, entries=40, block_s=5.0), MemoryPartition(1, block_s=5.0)
    stopping = asyncio.Event()
    seen_free: list[int] = []

    async def main() -> None:
        slots = slots_for(4, runs)
        loop = asyncio.create_task(rotation(slots, [busy, quiet], stopping).consume())
        while quiet.waiting is None or busy.waiting is None or len(runs.done) < 40:
            await asyncio.sleep(0.001)
        seen_free.append(slots.free)  # each idle partition's read holds one slot
        quiet.add(3)  # the waiting read returns one; the partition rejoins the turn for the rest
        while len(runs.done) < 43:
            await asyncio.sleep(0.001)
        stopping.set()
        slots.freed.set()
        busy.add(0)  # wake the waiting reads (empty-handed) so that the loop ends now
        quiet.add(0)
        await loop

    drive(main)
    assert seen_free == [2]
    assert busy.reads[0] == (4, False)  # in the turn: every free slot, without blocking
    assert (1, True) in quiet.reads  # the idle partition waited in a one-entry blocking read
    assert all(count == 1 for part in (busy, quiet) for count, block in part.reads if block)
    assert {f"1-{n}" for n in range(3)} <= set(runs.done)
    assert runs.most <= 4


def test_a_busy_partition_does_not_starve_another() -> None:
    runs = Runs(job_s=0.001)
    big, small = MemoryPartition(0, entries=200), MemoryPartition(1, entries=4)

    async def main() -> None:
        slots = slots_for(2, runs)
        await rotation(slots, [big, small], asyncio.Event(), drained_when_empty([big, small])).consume()

    drive(main)
    assert len(runs.done) == 204
    last_small = max(runs.done.index(f"1-{n}") for n in range(4))
    assert last_small < 20  # served in turn, not after the 200


def test_run_alone_waits_for_what_runs_and_for_a_waiting_read_and_nothing_runs_beside_it() -> None:
    runs = Runs(job_s=0.01)
    busy, idle = MemoryPartition(0, entries=6), MemoryPartition(1, block_s=0.2)
    stopping = asyncio.Event()
    claimed: list[str] = []

    async def main() -> None:
        slots = slots_for(4, runs)
        loop = asyncio.create_task(rotation(slots, [busy, idle], stopping).consume())
        while idle.waiting is None:
            await asyncio.sleep(0.001)

        async def claim() -> Raw | None:
            claimed.append("suspect")
            return {b"n": b"suspect"}

        idle.add(1)  # the waiting read returns an entry while run_alone waits for quiet
        busy.add(20)  # more work the loop must not read while the suspect runs
        assert await slots.run_alone([(busy, "suspect", claim)]) == 1
        stopping.set()
        slots.freed.set()
        await loop
        await asyncio.gather(*slots.inflight.values())

    drive(main)
    assert claimed == ["suspect"]
    assert runs.beside["suspect"] == set()
    assert "1-0" in runs.done  # what the waiting read returned ran too, before or after, never beside
    started_after = [e for e in runs.beside if "suspect" in runs.beside[e]]
    assert started_after == []  # nothing started while the suspect ran


def test_run_alone_runs_nothing_when_the_claim_finds_nothing() -> None:
    runs = Runs()

    async def main() -> None:
        slots = slots_for(2, runs)

        async def claim() -> Raw | None:
            return None

        assert await slots.run_alone([(MemoryPartition(0), "gone", claim)]) == 0
        assert not slots.inflight

    drive(main)
    assert runs.done == []


def test_a_lost_connection_rests_the_partition_with_one_line_each_way(caplog: pytest.LogCaptureFixture) -> None:
    runs = Runs()
    part = MemoryPartition(0, entries=5)
    part.fail_next = [redis.exceptions.ConnectionError("Connection refused")] * 3

    async def main() -> None:
        slots = slots_for(4, runs)
        await rotation(slots, [part], asyncio.Event(), drained_when_empty([part])).consume()

    with caplog.at_level(logging.INFO, logger="worker"):
        drive(main)
    assert len(runs.done) == 5
    lines = [r.getMessage() for r in caplog.records]
    assert sum("Lost the connection to Redis for jobs-0 (Connection refused)" in line for line in lines) == 1
    assert sum(line == "Reconnected to Redis." for line in lines) == 1


def test_a_lost_group_is_created_again_and_another_refusal_is_raised() -> None:
    runs = Runs()
    part = MemoryPartition(0, entries=2)
    part.fail_next = [redis.exceptions.ResponseError("NOGROUP No such key 'jobs' or consumer group 'workers'")]
    recreated: list[bool] = []

    async def recreate() -> None:
        recreated.append(True)

    async def main() -> None:
        slots = slots_for(2, runs)
        await rotation(slots, [part], asyncio.Event(), drained_when_empty([part]), recreate).consume()

    drive(main)
    assert recreated == [True] and len(runs.done) == 2

    part = MemoryPartition(0, entries=2)
    part.fail_next = [redis.exceptions.ResponseError("WRONGTYPE Operation against a key holding the wrong kind")]

    async def other() -> None:
        await rotation(slots_for(2, Runs()), [part], asyncio.Event()).consume()

    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        drive(other)


def test_on_stop_the_waiting_reads_return_and_what_they_got_runs() -> None:
    runs = Runs()
    parts = [MemoryPartition(0, block_s=0.3), MemoryPartition(1, block_s=0.3)]
    stopping = asyncio.Event()

    async def main() -> None:
        slots = slots_for(4, runs)
        loop = asyncio.create_task(rotation(slots, parts, stopping).consume())
        while any(part.waiting is None for part in parts):
            await asyncio.sleep(0.001)
        stopping.set()
        parts[1].add(1)  # arrives while the loop is on its way out
        await loop
        await asyncio.gather(*slots.inflight.values())

    drive(main)
    assert runs.done == ["1-0"]


@pytest.mark.parametrize("job_s", [0.0, 0.005, 0.03])
def test_run_alone_ends_whichever_of_it_and_the_loop_wakes_first(job_s: float) -> None:
    runs = Runs(job_s=job_s)
    parts = [MemoryPartition(0, entries=3, block_s=0.02), MemoryPartition(1, block_s=0.02)]
    stopping = asyncio.Event()
    ran: list[bool] = []

    async def main() -> None:
        slots = slots_for(4, runs)
        loop = asyncio.create_task(rotation(slots, parts, stopping).consume())
        for n in range(5):
            while not slots.held:
                await asyncio.sleep(0.001)

            async def claim() -> Raw | None:
                return {b"n": b"suspect"}

            ran.append(await slots.run_alone([(parts[n % 2], f"suspect-{n}", claim)]) == 1)
            parts[0].add(2)
        stopping.set()
        slots.freed.set()
        await loop

    drive(main)
    assert ran == [True] * 5
    assert all(runs.beside[f"suspect-{n}"] == set() for n in range(5))


def test_fast_jobs_are_read_ahead_and_start_oldest_first_without_overfilling() -> None:
    runs = Runs()
    part = MemoryPartition(0, entries=20_000)
    ahead = ReadAhead(ceiling=50)

    async def main() -> None:
        slots = slots_for(4, runs)
        await rotation(slots, [part], asyncio.Event(), drained_when_empty([part]), read_ahead=ahead).consume()
        assert not slots.ahead

    drive(main)
    assert list(runs.beside) == [f"0-{n}" for n in range(20_000)]  # each once, in the order read
    assert len(runs.tasks) < 20_000 // 2  # a slot that frees goes on to the next entry ahead in its task
    assert runs.most <= 4
    assert ahead.target > 0
    assert max(count for count, _block in part.reads) > 4  # reads fetched beyond the free slots
    assert any(not block for _count, block in part.reads)  # the buffer was topped up while the slots were busy
    assert max(count for count, _block in part.reads) <= 4 + 50


def test_a_backlog_is_read_ahead_from_its_first_milliseconds() -> None:
    """The rate window closes after WINDOW_ENTRIES entries when they come sooner than WINDOW_S, so a burst
    of 20,000 fast jobs (0.2 s) is not worked half through before anything is read ahead."""
    ahead = ReadAhead(ceiling=100)
    t = 10.0
    for _ in range(40):  # reads of 8 entries, each 0.1 ms apart, round trips of 0.05 ms
        ahead.note(8, t, t + 0.00005)
        t += 0.0001
        if ahead.target:
            break
    assert t - 10.0 <= 0.0035  # within 3.5 ms: after 256 entries, not after 0.1 s
    assert ahead.target == 100  # 80,000 entries/s x 5 ms covers more than the ceiling


def test_a_slow_trickle_closes_its_window_by_time() -> None:
    ahead = ReadAhead(ceiling=100)
    ahead.note(1, 0.0, 0.001)
    ahead.note(1, 0.05, 0.051)
    assert ahead.target == 0  # 2 entries, 0.05 s: the window is still open
    ahead.note(1, 0.2, 0.201)
    assert ahead.target == 0  # 3 entries in 0.2 s = 15/s: nothing worth holding ahead


def test_slow_jobs_are_not_read_ahead() -> None:
    runs = Runs(job_s=0.05)
    part = MemoryPartition(0, entries=24)

    async def main() -> None:
        slots = slots_for(4, runs)
        await rotation(
            slots, [part], asyncio.Event(), drained_when_empty([part]), read_ahead=ReadAhead(ceiling=50)
        ).consume()

    drive(main)
    assert len(runs.done) == 24
    assert all(count <= 4 for count, _block in part.reads)  # 80 jobs/s: nothing worth holding ahead


def test_entries_read_ahead_count_as_claimed_from_their_read() -> None:
    runs = Runs()
    part = MemoryPartition(0)

    async def main() -> None:
        slots = slots_for(1, runs)
        slots.take(part, [("0-1", {}), ("0-2", {}), ("0-3", {})], read_at=5.0)
        assert [entry_id for _p, entry_id, _raw, _at in slots.ahead] == ["0-2", "0-3"]
        assert slots.claimed_before(6.0) == {0: ["0-1", "0-2", "0-3"]}  # running and ahead alike
        assert slots.claimed_before(5.0) == {}
        await asyncio.gather(*slots.inflight.values())
        async with slots.reading:
            slots.start_ahead()
        await asyncio.gather(*slots.inflight.values())
        async with slots.reading:
            slots.start_ahead()
        await asyncio.gather(*slots.inflight.values())

    drive(main)
    assert runs.done == ["0-1", "0-2", "0-3"]


@pytest.mark.parametrize("job_s", [0.0, 30.0])
def test_on_stop_what_was_read_ahead_runs_as_slots_free_and_the_rest_is_returned_at_the_deadline(
    job_s: float,
) -> None:
    runs = Runs(job_s=job_s)
    part = MemoryPartition(0)
    left: list[str] = []

    async def main() -> None:
        slots = slots_for(1, runs)
        slots.take(part, [("0-1", {}), ("0-2", {}), ("0-3", {})], read_at=time.monotonic())
        grace_s = 5.0 if job_s == 0.0 else 0.05
        left.extend(entry_id for _p, entry_id, _raw, _at in await slots.run_out_ahead(time.monotonic() + grace_s))
        assert not slots.ahead
        for task in slots.inflight.values():
            if job_s:
                task.cancel()  # the long job: the drain's own grace is the worker's business
        await asyncio.gather(*slots.inflight.values(), return_exceptions=True)

    drive(main)
    if job_s == 0.0:
        assert (runs.done, left) == (["0-1", "0-2", "0-3"], [])
    else:
        assert (list(runs.beside), left) == (["0-1"], ["0-2", "0-3"])  # the slot never freed


def test_while_redis_refuses_what_was_read_ahead_waits_and_then_runs() -> None:
    runs = Runs()
    part = MemoryPartition(0)
    troubles: dict[str, float] = {"outcome 0/0-9": 1.0}  # the worker's episode of refused writes

    async def main() -> None:
        runs.slots = slots = Slots(1, runs, troubles)
        slots.take(part, [("0-1", {}), ("0-2", {}), ("0-3", {})], read_at=time.monotonic())
        await asyncio.gather(*slots.inflight.values())
        async with slots.reading:
            slots.start_ahead()
        assert (runs.done, len(slots.ahead), slots.free) == (["0-1"], 2, 1)  # the free slot is the loop's to read
        troubles.clear()
        for _ in range(2):
            async with slots.reading:
                slots.start_ahead()
            await asyncio.gather(*slots.inflight.values())

    drive(main)
    assert runs.done == ["0-1", "0-2", "0-3"]
