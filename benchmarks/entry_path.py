"""The files of ``worker/`` one entry's id passes through while a worker runs its job, in order.

    .venv/bin/python -m benchmarks.entry_path [--outcome succeed|retry|dead] [--calls]

Enqueues one job on a valkey-server of its own (embedded, stopped after), then
runs one worker in this process (:func:`worker.run_worker`, ``--burst``) with
a profile hook (``sys.setprofile`` and ``threading.setprofile``) that notes
each function of ``worker/`` called with an argument carrying the entry's id:
the id itself (bytes or text), or a tuple, list, set, dict or object (a
``Job``, a slot's entry) holding it, two levels deep; ``self`` is not looked
into (a part holding many entries is not the entry's path). A coroutine's
resumptions are not new calls. Consecutive calls in one file make one stop;
the figures are the stops, the files, and how often the path comes back to a
file it left. ``--outcome`` picks what the handler does: return, fail with
a retry left (the retry is a new entry of its own, not followed), or fail for
good (dead-lettered). ``--calls`` lists each function within its stop.

Why this measure: a reader following one entry through the code reads these
files in this order; every return to a file already left is a page turned
back (docs/architecture.md, "The life of one entry").
"""

from __future__ import annotations

import argparse
import dis
import os
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import redis

from worker import Job, RetryPolicy, job_kind, run_worker
from worker.embedded.servers import start_redis
from worker.kinds import Registry
from worker.settings import Settings
from worker.store.enqueue import enqueue

WORKER_DIR = Path(__file__).resolve().parents[1] / "worker"
DEPTH = 2
#: Containers longer than this are not looked into (a batch of many entries is read, not searched).
MAX_ITEMS = 64
RESUME = dis.opmap["RESUME"]


def carries(value: Any, wanted: tuple[bytes, str], depth: int = DEPTH) -> bool:
    """Whether ``value`` is the entry's id, or holds it within ``depth`` levels."""
    if isinstance(value, bytes | str):
        return value in wanted
    if depth == 0 or isinstance(value, int | float | bool | type(None) | memoryview | bytearray):
        return False
    if isinstance(value, dict):
        items = list(value.items())[:MAX_ITEMS] if len(value) <= MAX_ITEMS else []
        return any(carries(k, wanted, depth - 1) or carries(v, wanted, depth - 1) for k, v in items)
    if isinstance(value, tuple | list | set | frozenset):
        return len(value) <= MAX_ITEMS and any(carries(item, wanted, depth - 1) for item in value)
    attributes = getattr(value, "__dict__", None)
    if attributes is None:
        slots = getattr(type(value), "__slots__", ())
        attributes = {name: getattr(value, name, None) for name in slots} if isinstance(slots, tuple) else {}
    return isinstance(attributes, dict) and any(carries(v, wanted, depth - 1) for v in attributes.values())


def first_call(frame: FrameType) -> bool:
    """A call event for a fresh frame, not a coroutine's or generator's resumption (``RESUME 0``)."""
    code, at = frame.f_code.co_code, max(frame.f_lasti, 0)
    return code[at] != RESUME or code[at + 1] == 0


def arguments(frame: FrameType) -> list[Any]:
    """The values of the call's parameters, ``self`` and ``cls`` left out."""
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount
    count += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)  # *args, **kwargs
    names = [name for name in code.co_varnames[:count] if name not in ("self", "cls")]
    return [frame.f_locals[name] for name in names if name in frame.f_locals]


@dataclass
class EntryPath:
    """The calls of ``worker/`` that carried the entry's id, in the order they were made."""

    wanted: tuple[bytes, str]
    calls: list[tuple[str, str]] = field(default_factory=list)

    def hook(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        filename = frame.f_code.co_filename
        if not filename.startswith(str(WORKER_DIR)) or not first_call(frame):
            return
        if any(carries(value, self.wanted) for value in arguments(frame)):
            self.calls.append((Path(filename).relative_to(WORKER_DIR.parent).as_posix(), frame.f_code.co_name))

    def stops(self) -> list[tuple[str, list[str]]]:
        """Consecutive calls in one file gathered: ``(file, [function, ...])`` per stop."""
        gathered: list[tuple[str, list[str]]] = []
        for filename, function in self.calls:
            if gathered and gathered[-1][0] == filename:
                gathered[-1][1].append(function)
            else:
                gathered.append((filename, [function]))
        return gathered


def handler_for(outcome: str) -> tuple[Registry, str]:
    registry = Registry()

    @job_kind("traced", retry=RetryPolicy(retries=1 if outcome == "retry" else 0), registry=registry)
    async def traced(job: Job) -> None:
        """Return, or fail: the outcome the path is traced for."""
        if outcome != "succeed":
            raise RuntimeError("the traced job fails, as asked")

    return registry, "traced"


def traced_run(settings: Settings, registry: Registry, entry_id: str) -> EntryPath:
    """One ``--burst`` worker run in this process with the profile hook set on every thread."""
    path = EntryPath((entry_id.encode(), entry_id))
    hook: Callable[..., Any] = path.hook
    threading.setprofile(hook)
    sys.setprofile(hook)
    try:
        run_worker(settings, registry=registry, burst=True, stop=threading.Event())
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return path


def report(path: EntryPath, outcome: str, with_calls: bool) -> None:
    stops = path.stops()
    files = list(dict.fromkeys(filename for filename, _ in stops))
    returns = {name: sum(1 for f, _ in stops if f == name) - 1 for name in files}
    print(f"one entry's id, outcome {outcome}: {len(stops)} stops in {len(files)} files, {len(path.calls)} calls")
    for number, (filename, functions) in enumerate(stops, 1):
        print(f"{number:3} {filename}" + (f"  {', '.join(functions)}" if with_calls else ""))
    back = {name: count for name, count in returns.items() if count}
    print("returns to a file left before: " + (", ".join(f"{n} x{c}" for n, c in back.items()) or "none"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--outcome", choices=("succeed", "retry", "dead"), default="succeed")
    parser.add_argument("--calls", action="store_true", help="list each function within its stop")
    args = parser.parse_args()
    server = start_redis(Path(tempfile.mkdtemp(prefix="entry-path-")) / "valkey")
    prefix = f"entry-path-{uuid.uuid4().hex[:8]}:"
    env = {**os.environ, "REDIS_URL": server.url, "QUEUE_PREFIX": prefix, "ARCHIVE_URL": "off", "METRICS_PORT": "0"}
    try:
        settings = Settings.from_env(env)
        registry, kind = handler_for(args.outcome)
        client = redis.Redis.from_url(server.url)
        entry_id = enqueue(client, kind, {"order_id": "4471"}, prefix=prefix)
        client.close()
        report(traced_run(settings, registry, entry_id), args.outcome, args.calls)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
