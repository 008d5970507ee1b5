"""``python -m worker health``: is this worker alive? For a container's health check.

Healthy means: Redis answers, every partition's stream has the group
``workers``, and the heartbeat of this worker (``WORKER_NAME``; under a
supervisor each ``<WORKER_NAME>-<i>``; unnamed, any ``<host>-*``) is fresh.
One line on stdout says which; the exit code is 0 or 1.
"""

from __future__ import annotations

import socket

import redis

from worker.cli.exits import EXIT_FAILED, EXIT_OK
from worker.loop.runner import HEARTBEAT_TTL_S
from worker.observability.queue_state import glob_escape, live_workers
from worker.redact import redact
from worker.settings import Settings
from worker.store.connection import connect
from worker.store.keys import GROUP, Keys
from worker.store.partitions import keys_for, recorded_count


def health(settings: Settings) -> int:
    """Healthy: Redis answers, the group exists, a heartbeat of this worker is fresh."""
    keys = Keys(settings.prefix)
    try:
        client = connect(settings, socket_timeout=3, socket_connect_timeout=3)
        client.ping()
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
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        print(redact(f"unhealthy: Redis does not answer ({exc})"))
        return EXIT_FAILED
    # Under a supervisor (WORKER_PROCESSES > 1) the consumers are <WORKER_NAME>-<i>: each must beat.
    expected = settings.processes
    if settings.worker_name_set:
        worker_glob = glob_escape(settings.worker_name) + ("-*" if expected > 1 else "")
    else:
        worker_glob = glob_escape(socket.gethostname()) + "-*"
    beats = live_workers(client, keys, worker_glob)
    pattern = keys.heartbeat(worker_glob)
    if not beats:
        print(f"unhealthy: no heartbeat matching {pattern} in the last {HEARTBEAT_TTL_S} s")
        return EXIT_FAILED
    if len(beats) < expected:
        print(f"unhealthy: {len(beats)} of {expected} heartbeats matching {pattern} in the last {HEARTBEAT_TTL_S} s")
        return EXIT_FAILED
    print(f"healthy: {len(beats)} worker heartbeat(s) fresh")
    return EXIT_OK
