"""The job wire format: parsing entries at the loop's edge and encoding jobs.

A job is a flat map of strings (docs/worker.md, "Jobs and dead entries"): ``kind``, ``job_id`` or
``outbox_id``, ``attempts``, the payload's fields, ``request_id``, ``trace``,
and the W3C trace fields ``traceparent``, ``tracestate``, ``trace_link``
(:mod:`worker.store.trace_context`).
Parsing never raises: an entry that is not a valid job becomes a
:class:`Malformed` with the reason and the offending value, and the loop
dead-letters it. An entry over ``MAX_JOB_BYTES`` (written by anyone but
``enqueue``, which refuses one) is dead-lettered as ``oversized`` with each
field cut to its first :data:`KEPT_BYTES` and the size and SHA-256 of each
field cut (:func:`cut_down`), so ``jobs:dead`` and the archive stay small.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from itertools import chain
from typing import Any

from worker.job import Job
from worker.store import attempt_log
from worker.store.vocabulary import REASON_MALFORMED, REASON_OVERSIZED, REASON_UNKNOWN_KIND

#: Fields a failure adds (the dead-letter script; ``attempt_log`` also a retry); replay drops them again,
#: so a replayed job starts a fresh attempt log (the earlier one stays on the dead entry of ``replay_of``).
DEAD_FIELDS = ("error", "traceback", "reason", "failed_at", "worker", "attempt_log")
#: What an oversized entry keeps of each field (name and value): its first KiB.
KEPT_BYTES = 1024
#: The field of an oversized dead entry holding, for each field cut, its size and SHA-256 (JSON).
CUT_FIELD = "cut_fields"


@dataclass(frozen=True)
class Malformed:
    """An entry that cannot run: why (``reason``) and what was wrong (``error``)."""

    entry_id: str
    reason: str
    error: str
    kind: str
    kept: dict[str, str] | None = None
    """For an oversized entry, what its dead entry keeps instead of its fields (:func:`cut_down`)."""


def _preview(value: bytes | str, limit: int = 80) -> str:
    text = value if isinstance(value, str) else value.decode("utf-8", "backslashreplace")
    return repr(text if len(text) <= limit else text[:limit] + "...")


def parse_entry(
    entry_id: str, raw: dict[bytes, bytes], kinds: Collection[str], max_field_bytes: int, max_job_bytes: int
) -> Job | Malformed:
    """Turn a stream entry into a :class:`Job`, or say exactly why it is not one; ``kinds``: the names of
    the kinds this worker runs (its registry's, passed in: the store knows no registry).

    It runs once for every job, so it reads only what the loop needs before
    the job starts (kind, attempts, ids) and checks the rest is UTF-8 text,
    without decoding it (:attr:`Job.fields` decodes on first use). Joins of the
    names and of the values give the size (which bounds every field) and the
    text check at once; a newline between fields, which no UTF-8 sequence
    continues through, keeps a character cut over two values from passing.
    """
    names, values = b"\n".join(raw), b"\n".join(raw.values())
    total = len(names) + len(values) - 2 * (len(raw) - 1) if raw else 0
    if total > max_field_bytes or total > max_job_bytes:
        if total > max_job_bytes + attempt_log.ROOM:  # a retry's attempt log may take a job over the limit
            return _oversized(entry_id, raw, total, max_job_bytes)
        if max(map(len, chain(raw, raw.values()))) > max_field_bytes:
            return _too_big(entry_id, raw, max_field_bytes)
    if not (values.isascii() and names.isascii()):
        try:
            names.decode()
            values.decode()
        except UnicodeDecodeError:
            return _not_text(entry_id, raw)
    kind = raw.get(b"kind", b"").decode()
    if b"malformed_delayed" in raw:
        return Malformed(
            entry_id,
            REASON_MALFORMED,
            "MalformedJob: a member of the delayed set was not a JSON object of strings: "
            + _preview(raw[b"malformed_delayed"]),
            kind,
        )
    if not kind:
        return Malformed(
            entry_id,
            REASON_MALFORMED,
            f"MalformedJob: the entry has no 'kind' field (fields: {_preview(names.decode().replace(chr(10), ', '))})",
            "",
        )
    if kind not in kinds:
        known = ", ".join(sorted(kinds)) or "none"
        return Malformed(
            entry_id,
            REASON_UNKNOWN_KIND,
            f"UnknownKind: {_preview(kind)} is not a kind this worker knows (known: {known})",
            kind,
        )
    raw_attempts = raw.get(b"attempts", b"0")
    if not (raw_attempts.isascii() and raw_attempts.isdigit()) or len(raw_attempts) > 9:
        return Malformed(
            entry_id,
            REASON_MALFORMED,
            f"MalformedJob: 'attempts' must be a non-negative integer, got {_preview(raw_attempts)}",
            kind,
        )
    job_id = raw.get(b"job_id") or raw.get(b"outbox_id")
    return _of_entry(kind, job_id.decode() if job_id else entry_id, int(raw_attempts), entry_id, raw)


_of_entry = Job.of_entry


def job_id_of(fields: Mapping[str, str], default: str = "") -> str:
    """A job's identity: its ``job_id`` (minted by enqueue, or the caller's own), else its ``outbox_id``
    (the outbox row a relay published it from), else ``default``.

    The one definition the worker (``Job.job_id``), enqueue (which mints a
    ``job_id`` only for a job named by neither) and opslib's frames all use,
    so a job shows the same id while it waits, runs, retries and lies dead.
    """
    return fields.get("job_id") or fields.get("outbox_id") or default


def _not_text(entry_id: str, raw: dict[bytes, bytes]) -> Malformed:
    for name, value in raw.items():
        try:
            name.decode()
            value.decode()
        except UnicodeDecodeError:
            error = f"MalformedJob: field {_preview(name)} = {_preview(value)} is not UTF-8 text"
            break
    return Malformed(entry_id, REASON_MALFORMED, error, "")


def _too_big(entry_id: str, raw: dict[bytes, bytes], max_field_bytes: int) -> Malformed:
    name, value = max(raw.items(), key=lambda item: max(len(item[0]), len(item[1])))
    size = max(len(name), len(value))
    error = (
        f"MalformedJob: field {_preview(name)} is {size} bytes, over the limit of {max_field_bytes} (MAX_FIELD_BYTES)"
    )
    return Malformed(entry_id, REASON_MALFORMED, error, "")


def _oversized(entry_id: str, raw: dict[bytes, bytes], total: int, max_job_bytes: int) -> Malformed:
    kept = cut_down(raw)
    error = (
        f"Oversized: the entry is {total} bytes, over MAX_JOB_BYTES={max_job_bytes} and the {attempt_log.ROOM} "
        f"bytes a retry may add; each field is kept to its "
        f"first {KEPT_BYTES} bytes, with the size and SHA-256 of each field cut in {CUT_FIELD!r}"
    )
    return Malformed(entry_id, REASON_OVERSIZED, error, kept.get("kind", ""), kept)


def cut_down(raw: Mapping[bytes, bytes]) -> dict[str, str]:
    """An entry's fields, each name and value cut to its first :data:`KEPT_BYTES` (as text, bad bytes
    escaped), plus :data:`CUT_FIELD`: for each field cut, its value's size and SHA-256 (JSON)."""
    kept: dict[str, str] = {}
    cut: dict[str, dict[str, int | str]] = {}
    for name, value in raw.items():
        short = text(name[:KEPT_BYTES])
        kept[short] = text(value[:KEPT_BYTES])
        if len(name) > KEPT_BYTES or len(value) > KEPT_BYTES:
            cut[short] = {"bytes": len(value), "sha256": hashlib.sha256(value).hexdigest()}
    kept[CUT_FIELD] = json.dumps(cut, sort_keys=True, separators=(",", ":"))
    return kept


def job_bytes(fields: Mapping[str, str]) -> int:
    """A job's size as ``MAX_JOB_BYTES`` counts it: the UTF-8 bytes of every field's name and value (UTF-8
    is a concatenation, so the names joined and the values joined encode to the same count; two encodes
    instead of two a field: 0.4 against 0.6 µs for a job of six fields, on every enqueue)."""
    return len("".join(fields).encode()) + len("".join(fields.values()).encode())


def text(value: bytes | str) -> str:
    """A reply value as text, whether or not the client decodes responses (bad bytes escaped)."""
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else value


def encode_member(fields: dict[str, str]) -> str:
    """A job's fields as the ``delayed`` member: compact JSON with sorted keys."""
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def decode_member(member: str | bytes) -> dict[str, str]:
    """The inverse of :func:`encode_member` (for opslib and tests)."""
    value = json.loads(member)
    if not isinstance(value, dict):
        raise ValueError(f"a delayed member must be a JSON object, got {type(value).__name__}")
    return {str(k): str(v) for k, v in value.items()}


def json_object(value: bytes | str) -> dict[str, Any]:
    """A stored JSON object (a pause, a throttle, a replay outcome) as a dict; ``{}`` when it is not one."""
    try:
        loaded = json.loads(value)
    except ValueError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


def entry_epoch_s(entry_id: str) -> float:
    """The Unix time (seconds) a stream entry was added: the milliseconds before the ``-`` of its id."""
    return int(entry_id[: entry_id.index("-")]) / 1000


def parked_fields(member: bytes) -> dict[str, str]:
    """The fields of a member of ``parked`` (worker/store/lua/includes/parked_member.lua)."""
    parts = member.split(b"\0", 2)
    flat = json.loads(parts[2]) if len(parts) == 3 else None
    if not isinstance(flat, list):
        raise ValueError("a parked member holds its fields as a JSON array after its second NUL")
    return {str(name): str(value) for name, value in zip(flat[::2], flat[1::2], strict=False)}
