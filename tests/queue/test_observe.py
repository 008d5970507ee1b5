"""The loop's reports: successes gathered between two reads reach every observer once, as one call each."""

from __future__ import annotations

from worker.loop.observe import Successes, Tally
from worker.observability.flow import FlowCounter
from worker.observability.metrics import JobCollector
from worker.store.keys import Keys
from worker.store.vocabulary import OUTCOME_SUCCEEDED

DONE = [("a", 0.001), ("b", 0.2), ("a", 0.003)]


def observers() -> tuple[Tally, FlowCounter, JobCollector]:
    return Tally(), FlowCounter(None, Keys(), ["a", "b"], retention_days=8), JobCollector("ns")


def state(tally: Tally, flow: FlowCounter, jobs: JobCollector) -> tuple[object, ...]:
    return dict(tally.counts), set(tally.last_success), flow.runs, jobs.succeeded, jobs.buckets, jobs.duration_sum


def test_successes_reach_every_observer_at_the_hand_over_as_one_job_at_a_time_would() -> None:
    batched = observers()
    successes = Successes(batched)
    for kind, duration_s in DONE:
        successes.kinds.append(kind)
        successes.durations_s.append(duration_s)
    assert not batched[0].counts and not batched[1].runs and not batched[2].succeeded  # not before the read
    successes.hand_over()
    assert batched[0].counts == {("a", OUTCOME_SUCCEEDED): 2, ("b", OUTCOME_SUCCEEDED): 1}
    assert batched[2].succeeded == {("default", "a"): 2, ("default", "b"): 1}
    assert (successes.kinds, successes.durations_s) == ([], [])
    successes.hand_over()  # nothing new: nothing counted twice
    one_by_one = observers()
    for observer in one_by_one:
        for kind, duration_s in DONE:
            observer.job_finished(kind, OUTCOME_SUCCEEDED, duration_s, None)
    assert state(*batched) == state(*one_by_one)
