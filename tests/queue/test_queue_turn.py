"""The turn over served queues, without Redis: weighted shares of entries read whatever the batch sizes, a
queue that rejoins without a burst, strict order, and one queue's partitions in turn as before."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from worker.loop.queue_turn import MIN_SHARE, QueueTurn
from worker.store.queues import parse_served


@dataclass(eq=False)
class Part:
    queue_name: str
    waiting: object | None = None


def reads(turn: QueueTurn[Part], count: int, batch: dict[str, int]) -> Counter[str]:
    """Entries read per queue over ``count`` reads, each read of a queue returning ``batch[queue]``."""
    got: Counter[str] = Counter()
    for _ in range(count):
        part = turn.next()
        assert part is not None
        got[part.queue_name] += batch[part.queue_name]
        turn.charge(part, batch[part.queue_name])
    return got


def test_entries_read_follow_the_weights_whatever_each_reads_at_once() -> None:
    parts = [Part("critical"), Part("default"), Part("bulk")]
    turn = QueueTurn(parts, parse_served("critical:6,default:3,bulk:1"))
    got = reads(turn, 3000, {"critical": 1, "default": 7, "bulk": 20})
    total = sum(got.values())
    assert {q: round(100 * n / total) for q, n in got.items()} == {"critical": 60, "default": 30, "bulk": 10}


def test_a_queue_that_waited_rejoins_level_with_the_others() -> None:
    critical, bulk = Part("critical"), Part("bulk")
    turn = QueueTurn([critical, bulk], parse_served("critical:1,bulk:1"))
    bulk.waiting = object()  # found empty: waits in a read of its own
    assert reads(turn, 100, {"critical": 1, "bulk": 1}) == {"critical": 100}
    bulk.waiting = None
    assert reads(turn, 10, {"critical": 1, "bulk": 1}) == {"critical": 5, "bulk": 5}, "no burst of bulk"


def test_strict_order_reads_a_later_queue_only_while_the_earlier_wait() -> None:
    critical, default = Part("critical"), Part("default")
    turn = QueueTurn([critical, default], parse_served("critical,default"), strict=True)
    assert reads(turn, 5, {"critical": 1, "default": 1}) == {"critical": 5}
    critical.waiting = object()
    assert turn.next() is default
    assert turn.share(default, 100) == 100, "strict order reads ahead in full"


def test_one_queue_turns_over_its_partitions_and_reads_ahead_in_full() -> None:
    parts = [Part("default"), Part("default"), Part("default")]
    turn = QueueTurn(parts)
    assert [turn.next() for _ in range(4)] == [parts[0], parts[1], parts[2], parts[0]]
    parts[1].waiting = object()
    assert [turn.next() for _ in range(2)] == [parts[2], parts[0]]
    assert turn.share(parts[0], 100) == 100


def test_a_low_weight_queue_reads_ahead_its_share_but_never_less_than_the_floor() -> None:
    critical, bulk = Part("critical"), Part("bulk")
    turn = QueueTurn([critical, bulk], parse_served("critical:9,bulk:1"))
    assert turn.share(critical, 100) == 90 and turn.share(bulk, 100) == MIN_SHARE
    assert turn.share(bulk, 10) == 10
