"""Parsing at the loop's edge: every malformed shape becomes a reason, never an exception."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from worker.kinds import Job, Registry, job_kind
from worker.store import wire


@pytest.fixture
def registry() -> Registry:
    reg = Registry()

    @job_kind("send_email", registry=reg)
    async def send_email(job: object) -> None: ...

    return reg


def parse(
    raw: dict[bytes, bytes], registry: Registry, limit: int = 1024, job_limit: int = 1 << 20
) -> wire.Malformed | object:
    return wire.parse_entry("1-0", raw, registry.kinds, limit, job_limit)


def test_a_valid_entry_becomes_a_job(registry: Registry) -> None:
    job = parse({b"kind": b"send_email", b"job_id": b"j1", b"attempts": b"2", b"email": b"a@b.c"}, registry)
    assert not isinstance(job, wire.Malformed)
    assert (job.kind, job.job_id, job.attempts, job.entry_id) == ("send_email", "j1", 2, "1-0")  # type: ignore[attr-defined]
    assert job.fields["email"] == "a@b.c"  # type: ignore[attr-defined]


def test_outbox_id_stands_for_job_id_and_attempts_default_to_zero(registry: Registry) -> None:
    job = parse({b"kind": b"send_email", b"outbox_id": b"88210"}, registry)
    assert (job.job_id, job.attempts) == ("88210", 0)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("raw", "reason", "named"),
    [
        ({b"order_id": b"1"}, wire.REASON_MALFORMED, "no 'kind'"),
        ({b"kind": b"", b"order_id": b"1"}, wire.REASON_MALFORMED, "no 'kind'"),
        ({b"kind": b"render_ticketz"}, wire.REASON_UNKNOWN_KIND, "'render_ticketz'"),
        ({b"kind": b"send_email", b"attempts": b"two"}, wire.REASON_MALFORMED, "'two'"),
        ({b"kind": b"send_email", b"attempts": b"-1"}, wire.REASON_MALFORMED, "'-1'"),
        ({b"kind": b"send_email", b"attempts": b"1.5"}, wire.REASON_MALFORMED, "'1.5'"),
        ({b"kind": b"send_email", b"attempts": b""}, wire.REASON_MALFORMED, "''"),
        ({b"kind": b"send_email", b"attempts": "٣".encode()}, wire.REASON_MALFORMED, "'٣'"),
        ({b"kind": b"send_email", b"attempts": b"9" * 30}, wire.REASON_MALFORMED, "999"),
        ({b"kind": b"send_email", b"body": b"x" * 2000}, wire.REASON_MALFORMED, "2000 bytes"),
        ({b"kind": b"send_email", b"x" * 2000: b"1"}, wire.REASON_MALFORMED, "2000 bytes"),
        ({b"kind": b"send_email", b"name": b"\xff\xfe"}, wire.REASON_MALFORMED, "not UTF-8"),
        ({b"kind": b"send_email", b"\xc3(": b"v"}, wire.REASON_MALFORMED, "not UTF-8"),
        ({b"malformed_delayed": b"[1,2]"}, wire.REASON_MALFORMED, "[1,2]"),
    ],
)
def test_malformed_entries_name_the_reason_and_the_offending_value(
    raw: dict[bytes, bytes], reason: str, named: str, registry: Registry
) -> None:
    bad = parse(raw, registry)
    assert isinstance(bad, wire.Malformed)
    assert bad.reason == reason
    assert named in bad.error


def test_an_entry_over_max_job_bytes_is_oversized_and_cut_to_a_kib_per_field(registry: Registry) -> None:
    big = bytes(range(256)) * 20_000  # 5 MB, not UTF-8 either: the size is judged first
    raw = {b"kind": b"send_email", b"job_id": b"j1", b"body": big, b"x" * 3000: b"short"}
    bad = parse(raw, registry, limit=64 * 1024, job_limit=1 << 20)
    assert isinstance(bad, wire.Malformed)
    assert (bad.reason, bad.kind) == ("oversized", "send_email")
    total = sum(len(name) + len(value) for name, value in raw.items())
    assert f"is {total} bytes, over MAX_JOB_BYTES=1048576" in bad.error
    kept = bad.kept or {}
    assert kept["job_id"] == "j1"
    assert kept["body"] == wire.text(big[: wire.KEPT_BYTES])
    assert kept["x" * wire.KEPT_BYTES] == "short"
    cut = json.loads(kept[wire.CUT_FIELD])
    assert cut == {
        "body": {"bytes": len(big), "sha256": hashlib.sha256(big).hexdigest()},
        "x" * wire.KEPT_BYTES: {"bytes": 5, "sha256": hashlib.sha256(b"short").hexdigest()},
    }
    assert wire.job_bytes(kept) < 8 * wire.KEPT_BYTES
    # Under the job limit, the field limit still names the field that is too big (kept whole).
    small = parse({b"kind": b"send_email", b"body": b"y" * 2000}, registry, limit=1024, job_limit=1 << 20)
    assert isinstance(small, wire.Malformed) and (small.reason, small.kept) == ("malformed", None)


def test_delayed_member_round_trips_with_sorted_compact_json() -> None:
    fields = {"kind": "send_email", "job_id": "j", "attempts": "1", "email": "zoë@example.cz"}
    member = wire.encode_member(fields)
    assert member == '{"attempts":"1","email":"zoë@example.cz","job_id":"j","kind":"send_email"}'
    assert wire.decode_member(member) == fields


def test_the_parsed_job_is_the_job_its_constructor_makes(registry: Registry) -> None:
    """parse_entry builds a Job from the entry's bytes (the hot path): equal to the one the constructor
    makes, its fields decoded on first use, still immutable."""
    raw = {b"kind": b"send_email", b"job_id": b"j1", b"attempts": b"1", b"email": "zoë@example.cz".encode()}
    job = parse(raw, registry)
    assert isinstance(job, Job)
    assert job.field("email") == "zoë@example.cz" and job.field("absent", "-") == "-"
    fields = {"kind": "send_email", "job_id": "j1", "attempts": "1", "email": "zoë@example.cz"}
    made = Job(kind="send_email", job_id="j1", attempts=1, entry_id="1-0", fields=fields)
    assert job == made and repr(job) == repr(made)
    assert job.fields == fields and job.fields is job.fields  # decoded once
    assert job != Job(kind="send_email", job_id="j1", attempts=2, entry_id="1-0", fields=fields)
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.kind = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        hash(job)


def test_a_character_cut_across_two_fields_is_not_text(registry: Registry) -> None:
    """The text check joins the fields; a newline between them keeps a character split over two values
    (valid when glued together) from passing."""
    e_acute = "é".encode()
    bad = parse({b"kind": b"send_email", b"a": e_acute[:1], b"b": e_acute[1:]}, registry)
    assert isinstance(bad, wire.Malformed) and "not UTF-8" in bad.error
