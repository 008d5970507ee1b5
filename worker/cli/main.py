"""``python -m worker``: run the worker, enqueue a job, check health, apply the queue's tables.

Exit codes: 0 success (and a clean stop on SIGTERM/SIGINT); 1 a failure at
run time (Redis unreachable for ``enqueue``, an unhealthy ``health``); 2 a bad
setting or argument, named in one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import signal
import socket
import sys
from collections.abc import Coroutine, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis
from redis.crc import key_slot

from worker.app import WorkerApp
from worker.cli.acl import cmd_acl
from worker.embedded.servers import EmbeddedServerError, embedded_stack
from worker.errors import SettingsError, WorkerError
from worker.kinds import REGISTRY, import_kind_modules
from worker.loop.runner import Worker
from worker.loop.scheduler import scheduler_chore
from worker.observability import logs
from worker.settings import Settings, settings_help
from worker.store.connection import connect, connect_async
from worker.store.enqueue import enqueue
from worker.store.heartbeats import HEARTBEAT_TTL_S, live_workers
from worker.store.keys import GROUP, Keys
from worker.store.partitions import check_recorded, keys_for, partition_keys, record_count, recorded_count
from worker.store.roles import ROLES, refused

if TYPE_CHECKING:
    from worker.archive.archiver import Archiver
    from worker.observability.metrics import Metrics

# The archive (psycopg), the metrics endpoint (prometheus_client) and the supervisor are imported where
# they are switched on: psycopg alone adds about 55 ms to every start, of a worker or of `health`.

log = logging.getLogger("worker")

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m worker",
        description="A job worker: one queue on Redis Streams, running the kinds that WORKER_KINDS declares.",
        epilog=settings_help(Settings),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--burst", action="store_true", help="run until the queue is drained, then exit 0")
    parser.add_argument("--kinds", help="comma-separated modules with job kinds (overrides WORKER_KINDS)")
    parser.add_argument("--processes", help="worker processes under one supervisor (overrides WORKER_PROCESSES)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("run", help="run the worker (the default)")
    sub.add_parser(
        "keys",
        help="print each partition's key names and Redis Cluster slot (QUEUE_PREFIX, QUEUE_PARTITIONS; no server)",
    )
    enq = sub.add_parser("enqueue", help="add a job: enqueue KIND key=value ... [--delay 30s | --at ISO-8601]")
    enq.add_argument("kind")
    enq.add_argument("fields", nargs="*", metavar="key=value")
    when = enq.add_mutually_exclusive_group()
    when.add_argument("--delay", help="run later: e.g. 30s, 5m, 2h, 1.5 (seconds)")
    when.add_argument("--at", help="run at an ISO-8601 time with an offset, e.g. 2026-12-01T03:00:00+00:00")
    sub.add_parser(
        "health",
        help="exit 0 when Redis answers, the group exists and this worker's heartbeat is fresh",
    )
    acl = sub.add_parser("acl", help="print a Redis role's rules for ACL SETUSER (scoped to QUEUE_PREFIX; no server)")
    acl.add_argument("role", choices=sorted(ROLES), help=", ".join(f"{r.name}: {r.purpose}" for r in ROLES.values()))
    sub.add_parser(
        "migrate",
        help="apply the queue's own tables (the dead-letter archive) to ARCHIVE_URL "
        "(empty: DATABASE_URL, or the embedded PostgreSQL)",
    )
    return parser


def parse_delay(text: str) -> float:
    """``30s``, ``5m``, ``2h`` or a number of seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not match:
        raise SettingsError(f"--delay {text!r} is not a duration; use e.g. 30s, 5m, 2h or 1.5")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


def parse_fields(pairs: Sequence[str]) -> dict[str, str]:
    fields: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SettingsError(f"field {pair!r} is not key=value; e.g. order_id=4471")
        fields[name] = value
    return fields


def import_kinds(settings: Settings) -> None:
    """Import the modules that declare the kinds; the one-line hint when none is named."""
    if not settings.kinds:
        raise SettingsError("no job kinds: set WORKER_KINDS (e.g. WORKER_KINDS=stagedoor.kinds) or pass --kinds")
    import_kind_modules(settings.kinds)


def cmd_enqueue(settings: Settings, args: argparse.Namespace) -> int:
    fields = parse_fields(args.fields)
    delay_s = parse_delay(args.delay) if args.delay else None
    run_at = None
    if args.at:
        try:
            run_at = datetime.fromisoformat(args.at)
        except ValueError:
            raise SettingsError(f"--at {args.at!r} is not ISO-8601; e.g. 2026-12-01T03:00:00+00:00") from None
        if run_at.tzinfo is None:
            raise SettingsError(f"--at {args.at!r} has no UTC offset; add one, e.g. +00:00")
    import_kinds(settings)
    if args.kind not in REGISTRY.kinds:
        known = ", ".join(sorted(REGISTRY.kinds)) or "none"
        raise SettingsError(
            f"unknown kind {args.kind!r}: the modules in WORKER_KINDS declare {known} "
            "(a worker would dead-letter it as unknown_kind)"
        )
    client = connect(settings)
    check_recorded(recorded_count(client, settings.prefix), settings.partitions, Keys(settings.prefix))
    try:
        result = enqueue(
            client,
            args.kind,
            fields,
            delay_s=delay_s,
            run_at=run_at,
            prefix=settings.prefix,
            partitions=settings.partitions,
            wait_replicas=settings.wait_replicas,
        )
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
    print(result)
    return EXIT_OK


def cmd_keys(settings: Settings) -> int:
    """One line per partition: its number, slot and key names, for redis-cli and the docs' recipes."""
    for keys in partition_keys(settings):
        slot = key_slot(keys.jobs.encode())
        print(f"partition {keys.partition}  slot {slot}  {keys.jobs}  {keys.delayed}  {keys.dead}")
    return EXIT_OK


def cmd_health(settings: Settings) -> int:
    """Healthy: Redis answers, the group exists, a heartbeat of this worker is fresh.

    A handful of commands whatever the size of the keyspace (no SCAN; RESP2, so no HELLO; no CLIENT
    SETINFO): INFO (the mode), GET (the partition count), XINFO GROUPS per partition, one ZRANGE of
    the live workers.
    """
    if not settings.prefix:
        print(
            "warning: QUEUE_PREFIX is empty, so the roles of `python -m worker acl` cannot be scoped to this "
            "queue's keys; set QUEUE_PREFIX (e.g. stagedoor:)",
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
        print(f"unhealthy: Redis does not answer ({exc})")
        return EXIT_FAILED
    # Under a supervisor (WORKER_PROCESSES > 1) the consumers are <WORKER_NAME>-<i>: each must beat.
    name = os.environ.get("WORKER_NAME", "").strip()
    expected = settings.processes
    if name and expected == 1:
        beats, wanted = {w for w in live if w == name}, name
    else:
        stem = f"{name or socket.gethostname()}-"
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


def cmd_migrate(settings: Settings) -> int:
    """Apply the archive's table to ARCHIVE_URL, DATABASE_URL or the embedded PostgreSQL."""
    if not settings.archive_on:
        print("nothing to migrate: the archive is off (ARCHIVE_URL=off)")
        return EXIT_OK
    import psycopg

    from worker.archive.table import migrate_url

    configured = settings.archive_url or settings.database_url
    try:
        with embedded_stack("", configured, data_dir=Path(settings.data_dir), need_postgres=True, need_redis=False) as (
            _redis_url,
            url,
        ):
            migrate_url(url)
    except psycopg.OperationalError as exc:
        message = " ".join(str(exc).split())
        print(f"error: the archive's PostgreSQL does not answer: {message}", file=sys.stderr)
        return EXIT_FAILED
    print("migrated")
    return EXIT_OK


async def serve(settings: Settings, redis_url: str, database_url: str, burst: bool) -> None:
    """Run the worker with its lifespans until a signal (or the drained queue in burst mode)."""
    client = await connect_async(settings, redis_url, socket_keepalive=True, health_check_interval=30)
    app = WorkerApp(settings, client, redis_url, database_url, REGISTRY, burst=burst)
    try:
        await record_count(client, settings)
        async with contextlib.AsyncExitStack() as stack:
            archiver: Archiver | None = None
            if settings.archive_on:
                from worker.archive.archiver import Archiver

                archiver = Archiver(client, settings, settings.archive_url or database_url)
                stack.push_async_callback(archiver.close)
                await archiver.start()
                for chore in archiver.chores():
                    app.add_chore(chore)
                app.add_more_work(archiver.has_work)
            observers: list[Metrics] = []
            if settings.metrics_port:
                from worker.observability.metrics import worker_metrics

                observers = await stack.enter_async_context(worker_metrics(app, archiver))
            for lifespan in REGISTRY.lifespans:
                await stack.enter_async_context(lifespan(app))
            scheduler = scheduler_chore(app, observers)
            if scheduler is not None:
                app.add_chore(scheduler)
            worker = Worker(
                client,
                settings,
                REGISTRY,
                burst=burst,
                chores=app.chores,
                observers=observers,
                more_work=app.more_work,
            )
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, worker.stop)
            await worker.run()
    finally:
        await client.aclose()


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` on uvloop (about twice asyncio's speed for this loop) when installed."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)


def cmd_run(settings: Settings, burst: bool) -> int:
    import_kinds(settings)
    try:
        with embedded_stack(
            settings.redis_url,
            settings.database_url,
            data_dir=Path(settings.data_dir),
            need_postgres=REGISTRY.needs_database or (settings.archive_on and not settings.archive_url),
        ) as (redis_url, database_url):
            if not settings.redis_url:
                log.info("REDIS_URL is unset: started the embedded Valkey at %s.", redis_url)
            if database_url and not settings.database_url:
                log.info("DATABASE_URL is unset: started the embedded PostgreSQL at %s.", database_url)
            if settings.processes > 1:
                from worker.cli.supervisor import Supervisor

                return Supervisor(settings, redis_url, database_url, burst=burst).run()
            run_loop(serve(settings, redis_url, database_url, burst))
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        overrides = {"kinds": args.kinds} if args.kinds else {}
        if args.processes:
            overrides["processes"] = args.processes
        settings = Settings.from_env(**overrides)
        logs.configure(settings.log_format, settings.log_level)
        if args.command == "keys":
            return cmd_keys(settings)
        if args.command == "acl":
            return cmd_acl(settings, args.role)
        if args.command == "enqueue":
            return cmd_enqueue(settings, args)
        if args.command == "health":
            return cmd_health(settings)
        if args.command == "migrate":
            return cmd_migrate(settings)
        return cmd_run(settings, args.burst)
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (EmbeddedServerError, WorkerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except redis.exceptions.NoPermissionError as exc:
        print(f"error: {refused(exc, 'worker')}", file=sys.stderr)
        return EXIT_FAILED
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        print(f"error: Redis does not answer: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except redis.exceptions.RedisClusterException as exc:
        print(f"error: the Redis Cluster cannot serve the queue: {exc}", file=sys.stderr)
        return EXIT_FAILED
