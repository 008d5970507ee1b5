"""``python -m worker health``: is this worker alive? For a container's health check.

Healthy means: Redis answers, every partition's stream has the group
``workers``, and the heartbeat of this worker (``WORKER_NAME``; under a
supervisor each ``<WORKER_NAME>-<i>``; unnamed, any ``<host>-*``) is fresh.
One line on stdout says which; the exit code is 0 or 1.

Degraded (exit 0, so that an orchestrator does not restart a worker that
keeps outcomes for Redis): Redis refuses writes (out of memory, misconfigured
persistence, read-only, no permission), or a worker's heartbeat says it keeps
outcomes it could not record. Heartbeats cannot be written while Redis
refuses writes, so a degraded report does not need them.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import redis

from worker.cli.exits import EXIT_FAILED, EXIT_OK
from worker.loop.runner import HEARTBEAT_TTL_S
from worker.observability.queue_state import glob_escape, live_workers
from worker.redact import redact
from worker.settings import Settings
from worker.store.connection import connect
from worker.store.keys import GROUP, Keys
from worker.store.partitions import keys_for, recorded_count
from worker.store.refusals import describe_refusal, refusal_code

#: A script that may write (no ``no-writes`` flag) and writes nothing: refused exactly as the moves are.
PROBE = "#!lua\nreturn 1"


def health(settings: Settings) -> int:
    """Healthy: Redis answers, the group exists, a heartbeat of this worker is fresh. Degraded (exit 0):
    Redis refuses writes, or a worker says it keeps outcomes it cannot record."""
    keys = Keys(settings.prefix)
    try:
        client = connect(settings, socket_timeout=3, socket_connect_timeout=3)
        refused = write_refusal(client)
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
    beats = heartbeats(client, keys, worker_glob)
    waiting = sum(int(beat.get("outcomes_waiting") or 0) for beat in beats.values())
    refused = refused or next((str(beat["refused"]) for beat in beats.values() if beat.get("refused")), "")
    if refused:
        print(
            f"degraded: Redis refuses writes ({refused}); the workers keep {waiting} decided outcomes and "
            f"retry them, and read nothing new meanwhile ({len(beats)} heartbeat(s) fresh; none can be "
            "written while it lasts)"
        )
        return EXIT_OK
    pattern = keys.heartbeat(worker_glob)
    if not beats:
        print(f"unhealthy: no heartbeat matching {pattern} in the last {HEARTBEAT_TTL_S} s")
        return EXIT_FAILED
    if len(beats) < expected:
        print(f"unhealthy: {len(beats)} of {expected} heartbeats matching {pattern} in the last {HEARTBEAT_TTL_S} s")
        return EXIT_FAILED
    print(f"healthy: {len(beats)} worker heartbeat(s) fresh")
    return EXIT_OK


def write_refusal(client: Any) -> str:
    """Why Redis refuses writes now ("" when it does not): a script that may write, and writes nothing, is
    refused exactly when the workers' moves are (OOM, MISCONF, READONLY, NOPERM)."""
    try:
        client.eval(PROBE, 0)
    except redis.ResponseError as exc:
        if refusal_code(exc) is None:
            raise
        return describe_refusal(exc)
    return ""


def heartbeats(client: Any, keys: Keys, worker_glob: str) -> dict[str, dict[str, Any]]:
    """The fresh heartbeats matching ``worker_glob``: worker name -> what it said (``inflight``, ``slots``,
    ``outcomes_waiting``, ``refused``)."""
    names = sorted(live_workers(client, keys, worker_glob))
    values = client.mget([keys.heartbeat(name) for name in names]) if names else []
    return {name: json.loads(value) for name, value in zip(names, values, strict=True) if value}
