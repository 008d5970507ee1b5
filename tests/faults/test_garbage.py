"""Garbage on the stream (hypothesis): entries with arbitrary field names and values
(empty, huge, binary, unicode, missing kind, odd attempts) are added to ``jobs``
while one worker process runs. Every entry ends processed or dead-lettered with a
reason, exactly one of the two, and the worker never dies.

Each entry carries a ``probe`` field (a counter) besides its generated fields, so
the test can find it again: in the runs hash when a handler ran it, among the dead
entries (whose original fields are kept) when it was dead-lettered.
"""

from __future__ import annotations

import signal
import time

import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.faults.helpers import KINDS
from tests.faults.kinds_faults import runs_key
from tests.helpers import Workers, wait_for
from worker.store.keys import Keys

MAX_FIELD_BYTES = 1024
REASONS = {"malformed", "unknown_kind", "exhausted"}

texts = st.text(max_size=30).map(str.encode)
names = st.one_of(
    st.binary(min_size=1, max_size=24),
    st.text(min_size=1, max_size=24).map(str.encode),
    st.sampled_from([b"kind", b"attempts", b"job_id", b"outbox_id", b"malformed_delayed", b"replay_batch",
                     b"replay_of", b"error", b"reason", b"traceback", b"\x00", b"k\xffind"]),
).filter(lambda name: name != b"probe")  # fmt: skip
values = st.one_of(
    st.binary(max_size=40),
    texts,
    st.sampled_from([b"", b"record", b"fail", b"0", b"-1", b"1e3", b"9999999999", b" 3", "٣".encode(), b"\xff"]),
    st.binary(min_size=MAX_FIELD_BYTES + 1, max_size=3 * MAX_FIELD_BYTES),
)
# Valid kinds and attempts come often enough that handlers run too (processed, or failed and exhausted).
kinds = st.one_of(
    st.sampled_from([b"record", b"fail"]),
    st.sampled_from([b"", b"no_such_kind", b"RECORD", b"record ", b"record\x00"]),
    values,
)
attempts = st.one_of(
    st.sampled_from([b"0", b"1", b"4"]),
    st.sampled_from([b"-1", b"x", b"", b"1.5", b"99999999999", "٣".encode()]),
    values,
)
clean_names = st.text(st.characters(codec="utf-8"), min_size=1, max_size=24).map(str.encode)
garbage = st.builds(
    lambda base, kind, tries: {**base, **kind, **tries},
    st.dictionaries(names, values, max_size=5),
    st.one_of(st.just({}), kinds.map(lambda k: {b"kind": k})),
    st.one_of(st.just({}), attempts.map(lambda a: {b"attempts": a})),
)
# Entries a worker can run, with arbitrary payload fields: processed (record) or failed and exhausted (fail).
runnable = st.builds(
    lambda base, kind, tries: {**base, b"kind": kind, **tries},
    st.dictionaries(clean_names.filter(lambda n: n not in (b"probe", b"malformed_delayed")), texts, max_size=4),
    st.sampled_from([b"record", b"fail"]),
    st.one_of(st.just({}), st.sampled_from([b"0", b"1", b"4"]).map(lambda a: {b"attempts": a})),
)
entries = st.one_of(garbage, runnable)


def test_garbage_entries_end_processed_or_dead_lettered_and_the_worker_survives(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers
) -> None:
    proc = workers.start(KINDS, MAX_FIELD_BYTES=str(MAX_FIELD_BYTES))
    runs = runs_key(prefix)
    dead: dict[str, str] = {}  # probe -> reason
    seen = {"last_dead": "-", "probes": 0, "examples": 0}
    started = time.monotonic()

    def read_dead() -> None:
        low = seen["last_dead"] if seen["last_dead"] == "-" else f"({seen['last_dead']}"
        for entry_id, fields in r.xrange(keys.dead, min=low):
            seen["last_dead"] = entry_id.decode()
            dead[fields[b"probe"].decode()] = fields.get(b"reason", b"").decode()

    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.lists(entries, min_size=1, max_size=8))
    def example(batch: list[dict[bytes, bytes]]) -> None:
        probes = []
        for fields in batch:
            seen["probes"] += 1
            probe = str(seen["probes"])
            probes.append(probe)
            r.xadd(keys.jobs, {**fields, b"probe": probe.encode()})
        seen["examples"] += 1

        def settled() -> bool:
            read_dead()
            ran = r.hmget(runs, probes)
            return all(count is not None or probe in dead for probe, count in zip(probes, ran, strict=True))

        wait_for(settled, timeout_s=20, what=f"entries {probes} to be processed or dead-lettered")
        assert proc.poll() is None, f"the worker died:\n{workers.log(proc)[-3000:]}"

    example()

    read_dead()
    processed = {k.decode() for k in r.hkeys(runs)}
    assert not processed & set(dead), "an entry was both processed and dead-lettered"
    assert len(processed) + len(dead) == seen["probes"]
    assert set(dead.values()) <= REASONS, f"dead entries without a known reason: {set(dead.values()) - REASONS}"
    log = workers.log(proc)
    assert "Could not record the outcome" not in log
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    by_reason = {reason: sum(v == reason for v in dead.values()) for reason in sorted(REASONS)}
    print(
        f"\ngarbage figures: {seen['examples']} examples, {seen['probes']} entries: {len(processed)} processed, "
        f"{len(dead)} dead-lettered {by_reason}; worker alive throughout; {time.monotonic() - started:.1f} s"
    )
