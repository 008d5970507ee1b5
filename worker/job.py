"""What a handler receives: :class:`Job`, the parsed entry, its fields decoded on first use.

The loop needs only a job's kind, attempts and ids before it starts it
(:func:`worker.store.wire.parse_entry` reads those from the entry's bytes and
checks the rest is UTF-8 text). Turning every field into text is left to the
first reader of :attr:`Job.fields`: a handler that reads a field or two pays
for it once, a job that reads none never does, and the loop's own reads of a
field (:meth:`Job.field`) decode just that one.
"""

from __future__ import annotations

import threading
from dataclasses import FrozenInstanceError
from typing import Any

_NAMES = ("kind", "job_id", "attempts", "entry_id")


class Job:
    """The parsed entry: ``kind``, ``job_id``, ``attempts``, ``entry_id`` and ``fields`` (every field as
    text). Immutable, compared by value, as the frozen dataclass it used to be."""

    __hash__ = None  # type: ignore[assignment]  # equal by value, and fields is a dict

    kind: str
    job_id: str
    attempts: int
    entry_id: str

    def __init__(self, kind: str, job_id: str, attempts: int, entry_id: str, fields: dict[str, str]) -> None:
        attrs = self.__dict__
        attrs.update(kind=kind, job_id=job_id, attempts=attempts, entry_id=entry_id, _fields=fields, _raw=None)

    @classmethod
    def of_entry(cls, kind: str, job_id: str, attempts: int, entry_id: str, raw: dict[bytes, bytes]) -> Job:
        """A job whose ``fields`` are ``raw`` (an entry's UTF-8 bytes, already checked), decoded on first use.
        Fills the instance's ``__dict__`` directly: it runs once for every job."""
        job = _new(cls)
        attrs = job.__dict__
        attrs["kind"] = kind
        attrs["job_id"] = job_id
        attrs["attempts"] = attempts
        attrs["entry_id"] = entry_id
        attrs["_fields"] = None
        attrs["_raw"] = raw
        return job

    @property
    def fields(self) -> dict[str, str]:
        """Every field of the entry as text (the payload's, and ``kind``, ``attempts``, the ids...)."""
        fields: dict[str, str] | None = self.__dict__["_fields"]
        if fields is None:
            fields = {name.decode(): value.decode() for name, value in self.__dict__["_raw"].items()}
            self.__dict__["_fields"] = fields
        return fields

    @property
    def stopping(self) -> threading.Event:
        """Set when this attempt is to stop: it timed out, was cancelled, or the worker is shutting down. A plain
        handler that runs long checks it (``if job.stopping.is_set(): return``, or ``job.stopping.wait(s)``
        instead of ``time.sleep(s)``); an async handler also gets ``CancelledError``. Made on first use (by
        the handler or by the stop), so a job that never stops and never looks costs nothing."""
        attrs = self.__dict__
        event: threading.Event | None = attrs.get("_stopping")
        if event is None:
            event = attrs.setdefault("_stopping", threading.Event())  # one event, whichever thread asks first
        return event

    def field(self, name: str, default: str = "") -> str:
        """One field as text, ``default`` when absent, without decoding the others (the loop's own reads)."""
        fields: dict[str, str] | None = self.__dict__["_fields"]
        if fields is not None:
            return fields.get(name, default)
        value = self.__dict__["_raw"].get(name.encode())
        return default if value is None else value.decode()

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}: a Job is immutable")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}: a Job is immutable")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Job)
        return self._values() == other._values()

    def _values(self) -> tuple[Any, ...]:
        return (*(self.__dict__[name] for name in _NAMES), self.fields)

    def __repr__(self) -> str:
        values = ", ".join(f"{name}={value!r}" for name, value in zip((*_NAMES, "fields"), self._values(), strict=True))
        return f"Job({values})"


_new = Job.__new__
