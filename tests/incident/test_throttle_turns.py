"""take_token's schedule against the real Redis, one call at a time: turns 1/rate apart, a ticket keeps its
turn (an early comer is told the rest of its wait, not sent to the back), a new rate starts a new schedule.

Times are Redis's: each reply is compared with the turn it names, within the few milliseconds the calls take.
"""

from __future__ import annotations

import itertools

import redis

from worker.loop.gate import HOLD_S
from worker.store.keys import Keys
from worker.store.scripts import Scripts
from worker.store.wire import text

RATE = 4.0
SLACK_S = 0.05


def turn(scripts: Scripts, ticket: str = "", rate: float = RATE) -> tuple[float, str]:
    wait_s, held = scripts.take_token("alpha", rate, ticket, HOLD_S)
    return float(wait_s), text(held)


def test_turns_are_one_interval_apart_and_a_ticket_keeps_its_own(r: redis.Redis, keys: Keys) -> None:
    scripts = Scripts(r, keys)
    assert turn(scripts) == (0.0, "")  # an idle schedule: start now
    second_wait, second = turn(scripts)
    third_wait, _ = turn(scripts)
    assert abs(second_wait - 1 / RATE) < SLACK_S, second_wait
    assert abs(third_wait - 2 / RATE) < SLACK_S, third_wait
    again_wait, again = turn(scripts, second)  # the second job back too early: the rest of its own wait
    assert again == second
    assert 0 < again_wait <= second_wait
    fourth_wait, _ = turn(scripts)  # and nobody's turn moved for it
    assert abs(fourth_wait - 3 / RATE) < SLACK_S, fourth_wait


def test_a_ticket_of_another_schedule_takes_a_new_turn(r: redis.Redis, keys: Keys) -> None:
    scripts = Scripts(r, keys)
    turn(scripts)
    _, ticket = turn(scripts)
    r.delete(keys.bucket("alpha"))  # what opslib.throttle does with a new rate
    assert turn(scripts, ticket) == (0.0, "")  # a new schedule, whose first turn is now
    assert turn(scripts, rate=RATE / 2) == (0.0, "")  # a new rate: a new schedule, whose first turn is now
    wait_s, _ = turn(scripts, rate=RATE / 2)  # three starts in this second: the rate plus one
    assert 1 - SLACK_S < wait_s <= 1, wait_s


def test_no_rate_means_start_now(r: redis.Redis, keys: Keys) -> None:
    scripts = Scripts(r, keys)
    for _ in range(3):
        assert scripts.take_token("alpha", None, "", HOLD_S) == [b"0", b""]


def test_a_pile_of_late_turns_starts_one_seconds_worth_and_the_rest_queue_again(r: redis.Redis, keys: Keys) -> None:
    scripts = Scripts(r, keys)
    turn(scripts)  # a start now, in the last second's record
    _, ticket = turn(scripts)
    gen, _, at = ticket.partition(":")
    late = f"{gen}:{float(at) - 10:.6f}"  # ten seconds late: the workers were away
    replies = [turn(scripts, late) for _ in range(8)]
    started = [reply for reply in replies if reply == (0.0, "")]
    assert len(started) == RATE, replies  # with the start before them: the rate plus one in that second
    waits = [wait_s for wait_s, _ in replies[len(started) :]]
    assert waits == sorted(waits) and waits[0] > 0, waits  # the rest: new turns, one after the other
    assert all(abs(b - a - 1 / RATE) < SLACK_S for a, b in itertools.pairwise(waits)), waits
