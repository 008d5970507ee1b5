"""``python -m worker health``: is this worker alive? For a container's health check.

Healthy means: Redis answers, every partition's stream has the group
``workers``, and the heartbeat of this worker (``WORKER_NAME``; under a
supervisor each ``<WORKER_NAME>-<i>``; unnamed, any ``<host>-*``) is fresh.
One line on stdout says which; the exit code is 0 or 1.

A handful of commands whatever the size of the keyspace (no SCAN; RESP2, so no
HELLO; no CLIENT SETINFO): INFO (the mode), GET (the partition count), XINFO
GROUPS per partition, one ZRANGE of the live workers (:mod:`worker.store.heartbeats`).
An empty ``QUEUE_PREFIX`` gets a warning on stderr: the Redis roles need one.
"""

from __future__ import annotations

import socket
import sys

import redis

from worker.cli.exits import EXIT_FAILED, EXIT_OK
from worker.redact import redact
from worker.settings import Settings
from worker.store.connection import connect
from worker.store.heartbeats import HEARTBEAT_TTL_S, live_workers
from worker.store.keys import GROUP, Keys
from worker.store.partitions import keys_for, recorded_count


def health(settings: Settings) -> int:
    """Healthy: Redis answers, the group exists, a heartbeat of this worker is fresh."""
    if not settings.prefix:
        print(
            "warning: QUEUE_PREFIX is empty, so the roles of `python -m worker acl` cannot be scoped to this "
            "queue's keys; set QUEUE_PREFIX (e.g. myapp:)",
            file=sys.stderr,
        )
    keys = Keys(settings.prefix)
    try:
        client = connect(settings, socket_timeout=3, socket_connect_timeout=3, protocol=2)
        count = recorded_count(client, settings.prefix) or settings.partitions
        for part in keys_for(settings.prefix, count):
            try:
                groups = client.xinfo_groups(part.jobs)
            except redis.ResponseError:
                print(f"unhealthy: stream {part.jobs} does not exist yet")
                return EXIT_FAILED
            if not any(g["name"] in (GROUP, GROUP.encode()) for g in groups):
                print(f"unhealthy: consumer group {GROUP} does not exist on {part.jobs}")
                return EXIT_FAILED
        live = live_workers(client, keys)
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        print(redact(f"unhealthy: Redis does not answer ({exc})"))
        return EXIT_FAILED
    # Under a supervisor (WORKER_PROCESSES > 1) the consumers are <WORKER_NAME>-<i>: each must beat.
    expected = settings.processes
    if settings.worker_name_set and expected == 1:
        beats, wanted = {w for w in live if w == settings.worker_name}, settings.worker_name
    else:
        stem = f"{settings.worker_name if settings.worker_name_set else socket.gethostname()}-"
        beats, wanted = {w for w in live if w.startswith(stem)}, f"{stem}*"
    where = f"of {wanted} in {keys.workers} in the last {HEARTBEAT_TTL_S} s"
    if not beats:
        print(f"unhealthy: no heartbeat {where}")
        return EXIT_FAILED
    if len(beats) < expected:
        print(f"unhealthy: {len(beats)} of {expected} heartbeats {where}")
        return EXIT_FAILED
    print(f"healthy: {len(beats)} worker heartbeat(s) fresh")
    return EXIT_OK
