"""The enqueuer's side of the tracing tests, run as a process of its own with the SDK configured:

    python -m tests.tracing.helpers_client SPANS_FILE enqueue KIND [FIELD=VALUE ...]   prints the entry id
    python -m tests.tracing.helpers_client SPANS_FILE replay DEAD_ID                   prints the new entry id

Each runs inside a root span (``checkout`` or ``fix``), as an application's request or an
analyst's notebook cell would; ``REDIS_URL`` and ``QUEUE_PREFIX`` name the queue.
"""

from __future__ import annotations

import os
import sys

import redis

from tests.tracing import helpers_spans as spans


def main(spans_file: str, command: str, *args: str) -> None:
    provider = spans.install(spans_file)
    tracer = provider.get_tracer("tests.tracing")
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    if command == "enqueue":
        from worker import enqueue

        fields = dict(arg.split("=", 1) for arg in args[1:])
        with tracer.start_as_current_span("checkout"):
            print(enqueue(client, args[0], fields))
    elif command == "replay":
        from opslib import replay

        with tracer.start_as_current_span("fix"):
            print(replay([args[0]], client=client).new_id.iat[0])
    else:
        raise SystemExit(f"unknown command {command!r}: enqueue or replay")


if __name__ == "__main__":
    main(*sys.argv[1:])
