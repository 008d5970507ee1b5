"""What scripts/container-test.sh asks of the queue and of the workers' /metrics, from the host.

Reads ``REDIS_URL`` and ``QUEUE_PREFIX`` from the environment, like the worker.

    python scripts/queue_probe.py enqueue KIND COUNT [key=value ...]
    python scripts/queue_probe.py wait-pending COUNT [--timeout S]   # COUNT entries in flight
    python scripts/queue_probe.py wait-drained [--timeout S]         # nothing undelivered, pending or delayed
    python scripts/queue_probe.py state                              # the queue-wide numbers, as JSON
    python scripts/queue_probe.py succeeded KIND PORT [PORT ...]     # <ns>_jobs_succeeded_total per worker

Exit status 0 when the condition holds, 1 (with the last state) when it does not in time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

import httpx
import redis
from prometheus_client.parser import text_string_to_metric_families

from worker.observability.queue_state import QueueState, read_queue_state
from worker.store.enqueue import enqueue
from worker.store.keys import Keys


def queue_state() -> QueueState:
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    try:
        return read_queue_state(client, Keys(os.environ.get("QUEUE_PREFIX", "")), reclaim_idle_ms=60_000)
    finally:
        client.close()


def wait(condition: str, holds: object, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while True:
        state = queue_state()
        if holds(state):  # type: ignore[operator]
            print(f"{condition}: {json.dumps(dataclasses.asdict(state))}")
            return 0
        if time.monotonic() > deadline:
            print(f"not {condition} after {timeout_s:g} s: {json.dumps(dataclasses.asdict(state))}")
            return 1
        time.sleep(0.1)


def succeeded(kind: str, port: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5, trust_env=False).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.endswith("_jobs_succeeded_total") and s.labels.get("kind") == kind  # any METRICS_NAMESPACE
    )


def main() -> int:
    parser = argparse.ArgumentParser(prog="queue_probe.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    enq = sub.add_parser("enqueue")
    enq.add_argument("kind")
    enq.add_argument("count", type=int)
    enq.add_argument("fields", nargs="*", metavar="key=value")
    for name in ("wait-pending", "wait-drained"):
        cmd = sub.add_parser(name)
        if name == "wait-pending":
            cmd.add_argument("count", type=int)
        cmd.add_argument("--timeout", type=float, default=60.0)
    sub.add_parser("state")
    suc = sub.add_parser("succeeded")
    suc.add_argument("kind")
    suc.add_argument("ports", type=int, nargs="+")
    args = parser.parse_args()

    if args.command == "enqueue":
        client = redis.Redis.from_url(os.environ["REDIS_URL"])
        fields = dict(pair.split("=", 1) for pair in args.fields)
        for _ in range(args.count):
            enqueue(client, args.kind, fields, prefix=os.environ.get("QUEUE_PREFIX", ""))
        print(f"enqueued {args.count} {args.kind} jobs")
        return 0
    if args.command == "wait-pending":
        return wait(f"{args.count} jobs in flight", lambda s: s.pending >= args.count, args.timeout)
    if args.command == "wait-drained":
        return wait("drained", lambda s: s.lag == 0 and s.pending == 0 and s.delayed == 0, args.timeout)
    if args.command == "state":
        print(json.dumps(dataclasses.asdict(queue_state())))
        return 0
    counts = {port: succeeded(args.kind, port) for port in args.ports}
    print(" ".join(f"worker on :{port} ran {n:.0f} {args.kind} jobs;" for port, n in counts.items()), end=" ")
    print(f"{sum(counts.values()):.0f} in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
