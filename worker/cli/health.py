"""``python -m worker health``: is this worker alive? For a container's health check.

Healthy means: Redis answers, every partition's stream has the group
``workers``, and the heartbeat of this worker (``WORKER_NAME``; under a
supervisor each ``<WORKER_NAME>-<i>``; unnamed, any ``<host>-*``) is fresh.
One line on stdout says which; the exit code is 0 or 1. A healthy worker's
line also names the kinds paused (since when, by whom, why) and throttled:
a worker holding a paused kind's jobs is healthy, and says why they wait.
Those names and reasons are anyone's text (a job's kind, a pause's reason),
so the line shows their control and bidi characters as escapes
(:func:`worker.printable.printable`), as every log line does.

Degraded (exit 0, so that an orchestrator does not restart a worker that
keeps decided outcomes for Redis): Redis refuses writes (out of memory,
misconfigured persistence, read-only, no permission). The live workers are
read by a script that may write and writes nothing (:data:`LIVE_IF_WRITABLE`),
refused exactly when the workers' moves are, so one command answers both
questions. Heartbeats cannot be written while Redis refuses writes, so a
degraded report does not need them.

A handful of commands whatever the size of the keyspace (no SCAN; RESP2, so no
HELLO; no CLIENT SETINFO): INFO (the mode), GET (the partition count), XINFO
GROUPS per partition, one EVAL reading the live workers (:mod:`worker.store.heartbeats`), and
for a healthy worker two HGETALL (the pauses and the throttles), a ZCARD of each partition's
``fair:queue`` (the fair jobs waiting for their key's turn, named on the line), Redis's ``TIME`` (the
line says when this machine's clock is more than 2 s off it) and, per
partition, one bounded ZRANGEBYSCORE of what is due in ``delayed`` within the
hand-back's wait: the entries handed back to wait for a worker that runs their
kind or version (``waiting_since`` set), counted by kind and version (and
named queue, unless ``default``) as ``opslib.kinds()`` counts them in ``awaiting`` and the metric
``<ns>_jobs_awaiting_worker`` does (one count: :mod:`worker.store.awaiting`).
An empty ``QUEUE_PREFIX`` gets a warning on stderr: the Redis roles need one.
"""

from __future__ import annotations

import socket
import sys
import time
from collections import Counter
from typing import Any

import redis

from worker.cli.exits import EXIT_FAILED, EXIT_OK
from worker.printable import printable
from worker.redact import redact
from worker.settings import Settings
from worker.store.awaiting import AHEAD_S, AWAITING_CAP, count_awaiting, read_due_soon
from worker.store.connection import connect, is_cluster
from worker.store.heartbeats import HEARTBEAT_TTL_S, live_workers
from worker.store.keys import GROUP, Keys
from worker.store.partitions import keys_for, recorded_count
from worker.store.queues import DEFAULT_QUEUE, describe_served
from worker.store.refusals import describe_refusal, refusal_code
from worker.store.server_clock import WARN_S
from worker.store.wire import json_object, text

#: The live workers (KEYS[1]: ``workers``; ARGV[1]: the exclusive lower bound, now), read by a script
#: without the ``no-writes`` flag: Redis refuses it exactly when it refuses the moves.
LIVE_IF_WRITABLE = "#!lua\nreturn redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], '+inf')"
#: On a single server the same script also reads what is held back (KEYS[2]: ``paused``, KEYS[3]:
#: ``throttles``), what is due soon in each partition's ``delayed`` (KEYS[4..3+N]; ARGV[1]: seconds ahead
#: of now, ARGV[2]: the cap, ARGV[3]: N) and the fair jobs waiting in each partition's ``fair:queue``
#: (KEYS[4+N..]), all on Redis's clock (``TIME``, returned last), so health stays at four commands; a
#: cluster keeps those keys in other slots.
LIVE_AND_HELD_IF_WRITABLE = """#!lua
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local parts = tonumber(ARGV[3])
local due, fair = {}, 0
for i = 4, 3 + parts do
  due[#due + 1] = redis.call('ZRANGEBYSCORE', KEYS[i], '-inf', now + tonumber(ARGV[1]), 'LIMIT', 0, tonumber(ARGV[2]))
  fair = fair + redis.call('ZCARD', KEYS[i + parts])
end
return {redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%.6f', now), '+inf'), redis.call('HGETALL', KEYS[2]),
        redis.call('HGETALL', KEYS[3]), due, t, fair}"""


def health(settings: Settings) -> int:
    """Healthy: Redis answers, the group exists, a heartbeat of this worker is fresh. Degraded (exit 0):
    Redis refuses writes."""
    keys = Keys(settings.prefix)
    try:
        client = connect(settings, socket_timeout=3, socket_connect_timeout=3, protocol=2)
        if not settings.prefix:  # said once Redis answered: a missing or unreachable server stays one line
            print(
                "warning: QUEUE_PREFIX is empty, so the roles of `python -m worker acl` cannot be scoped to this "
                "queue's keys; set QUEUE_PREFIX (e.g. myapp:)",
                file=sys.stderr,
            )
        count = recorded_count(client, settings.prefix) or settings.partitions
        served = [part for queue in settings.queues for part in keys_for(settings.prefix, count, queue.name)]
        for part in served:
            try:
                groups = client.xinfo_groups(part.jobs)
            except redis.ResponseError:
                print(f"unhealthy: stream {part.jobs} does not exist yet")
                return EXIT_FAILED
            if not any(g["name"] in (GROUP, GROUP.encode()) for g in groups):
                print(f"unhealthy: consumer group {GROUP} does not exist on {part.jobs}")
                return EXIT_FAILED
        live, held, refused = live_unless_refused(client, keys, served)
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
    if refused:
        print(
            f"degraded: Redis refuses writes ({refused}); the workers keep their decided outcomes and retry "
            f"them, and read nothing new meanwhile ({len(beats)} heartbeat(s) fresh; none can be written while "
            "it lasts; the outcomes_waiting metric counts what waits)"
        )
        return EXIT_OK
    where = f"of {wanted} in {keys.workers} in the last {HEARTBEAT_TTL_S} s"
    if not beats:
        print(f"unhealthy: no heartbeat {where}")
        return EXIT_FAILED
    if len(beats) < expected:
        print(f"unhealthy: {len(beats)} of {expected} heartbeats {where}")
        return EXIT_FAILED
    served_line = f", serving {describe_served(settings.queues)} ({settings.queue_order})"
    queues = "" if len(settings.queues) == 1 else served_line
    print(printable(f"healthy: {len(beats)} worker heartbeat(s) fresh{queues}{held}"))  # kinds, reasons: anyone's
    return EXIT_OK


def held_back(paused: dict[Any, Any], throttles: dict[Any, Any]) -> str:
    """ "; paused: K since T by B (why); throttled: K N/s" for the health line ("" when nothing is held)."""
    said = []
    for kind, raw in sorted(paused.items()):
        pause = json_object(raw)
        since, by, why = pause.get("since", "?"), pause.get("by", "?"), pause.get("reason", "")
        said.append(f"paused: {text(kind)} since {since} by {by} ({why})")
    for kind, raw in sorted(throttles.items()):
        said.append(f"throttled: {text(kind)} {json_object(raw).get('per_s', '?')}/s")
    return "".join(f"; {line}" for line in said)


def live_unless_refused(client: Any, keys: Keys, parts: list[Keys]) -> tuple[set[str], str, str]:
    """The live workers, what is held back (:func:`held_back`, and this machine's clock when it is off
    Redis's: :func:`clock_note`) and why Redis refuses writes now ("" when it does not). One script on a
    single server; on a cluster the pauses and throttles are read apart. Heartbeats are on Redis's clock
    (:mod:`worker.store.server_clock`), and so is "now" here. When Redis refuses, the live workers are read
    again by a plain ZRANGE (the degraded line needs nothing more). ``parts``: the served queues' partitions
    (``default``'s first when it is served); the pauses are read from ``default``'s first partition, where
    every pause is written."""
    paused_at = Keys(keys.prefix, parts[0].tag, 0).paused  # the tags are the same in every queue
    before = time.time()
    try:
        if is_cluster(client):
            server = client.time()
            now = int(server[0]) + int(server[1]) / 1e6
            names = client.eval(LIVE_IF_WRITABLE, 1, keys.workers, f"({now}")
            paused, throttles = client.hgetall(paused_at), client.hgetall(keys.throttles)
            due = [read_due_soon(client, part.delayed, now) for part in parts]
            fair = sum(int(client.zcard(part.fair_queue)) for part in parts)
        else:
            script_keys = (keys.workers, paused_at, keys.throttles, *(part.delayed for part in parts))
            script_keys += tuple(part.fair_queue for part in parts)
            names, paused_flat, throttles_flat, due, server, fair = client.eval(
                LIVE_AND_HELD_IF_WRITABLE, len(script_keys), *script_keys, AHEAD_S, AWAITING_CAP, len(parts)
            )
            now = int(server[0]) + int(server[1]) / 1e6
            paused, throttles = _pairs(paused_flat), _pairs(throttles_flat)
    except redis.ResponseError as exc:
        if refusal_code(exc) is None:
            raise
        return live_workers(client, keys), "", describe_refusal(exc)
    turns = f"; fair: {fair} job(s) waiting for their key's turn" if fair else ""
    waits = awaiting(due, [part.queue for part in parts])
    said = held_back(paused, throttles) + waits + turns + clock_note(now - (before + time.time()) / 2)
    return {text(name) for name in names}, said, ""


def clock_note(offset_s: float) -> str:
    """ "; this machine's clock is +130.0 s off Redis's ..." when ``offset_s`` (Redis's time minus this
    machine's, as the worker measures it) is past :data:`~worker.store.server_clock.WARN_S`; else ""."""
    if abs(offset_s) <= WARN_S:
        return ""
    return (
        f"; this machine's clock is {-offset_s:+.1f} s off Redis's (schedules, delayed jobs and retries follow "
        "Redis's; fix the time with NTP)"
    )


def awaiting(due: list[list[Any]], queues: list[str]) -> str:
    """ "; waiting for a worker: N kind vV, N kind vV in bulk, ..." from the members due soon in each
    partition's ``delayed`` (``queues``: each partition's named queue, in step; ``default`` goes unnamed; ""
    when none waits), counted by :func:`worker.store.awaiting.count_awaiting`; "at least" when a partition's
    read reached :data:`~worker.store.awaiting.AWAITING_CAP`."""
    found = count_awaiting(due, queues)
    counts: Counter[str] = Counter()
    for (queue, kind, version), n in found.counts.items():
        counts[f"{kind} v{version}{'' if queue == DEFAULT_QUEUE else f' in {queue}'}"] += n
    if not counts:
        return ""
    least = "at least " if found.capped else ""
    said = ", ".join(f"{n} {what}" for what, n in sorted(counts.items()))
    return f"; waiting for a worker: {least}{said}"


def _pairs(flat: list[Any]) -> dict[Any, Any]:
    """A script's HGETALL reply (a flat list) as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))
