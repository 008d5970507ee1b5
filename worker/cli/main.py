"""``python -m worker``: its arguments, and the small commands (enqueue, keys, migrate).

Running a worker is :func:`worker.cli.serve.run` (no argparse there: an
application or a test calls it with its own settings), ``health`` is
:mod:`worker.cli.health`, the supervisor :mod:`worker.cli.supervisor`.
Exit codes: :mod:`worker.cli.exits`.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from redis.crc import key_slot

from worker.cli.acl import cmd_acl
from worker.cli.exits import EXIT_FAILED, EXIT_OK, one_line_errors
from worker.cli.fail_closed import use_embedded
from worker.cli.health import health
from worker.cli.metrics_endpoint import serve_backlog
from worker.cli.serve import import_kinds, run
from worker.embedded.servers import embedded_stack
from worker.errors import SettingsError
from worker.kinds import REGISTRY
from worker.observability import logs
from worker.redact import one_line, redact
from worker.settings import Settings, settings_help
from worker.store.connection import connect
from worker.store.enqueue import enqueue
from worker.store.keys import Keys
from worker.store.partitions import check_recorded, recorded_count, served_keys
from worker.store.queues import DEFAULT_QUEUE, Served
from worker.store.roles import ROLES


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m worker",
        description="A job worker: named queues on Redis Streams (WORKER_QUEUES), running the kinds that WORKER_KINDS "
        "declares.",
        epilog=settings_help(Settings),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--burst", action="store_true", help="run until the queue is drained, then exit 0")
    parser.add_argument("--kinds", help="comma-separated modules with job kinds (overrides WORKER_KINDS)")
    parser.add_argument("--processes", help="worker processes under one supervisor (overrides WORKER_PROCESSES)")
    parser.add_argument(
        "--queues", help="queues served, with weights, e.g. critical:6,default:3,bulk:1 (overrides WORKER_QUEUES)"
    )
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
    enq.add_argument("--queue", help="the named queue (default: the kind's declared queue, else default)")
    enq.add_argument("--fair-key", help="the tenant whose turn the job waits for, e.g. org-17 (fair shares)")
    enq.add_argument("--unique-key", help="at most one job of this kind and key until it is done (docs/worker.md)")
    enq.add_argument("--unique-for", help="with --unique-key: hold the key this long from now too, e.g. 1h")
    enq.add_argument("--job-id", help="the job's id: the same id again within 24 h adds nothing")
    sub.add_parser(
        "health",
        help="exit 0 when Redis answers, the group exists and this worker's heartbeat is fresh",
    )
    sub.add_parser(
        "metrics",
        help="serve the backlog gauges an autoscaler reads on METRICS_PORT, from Redis at each scrape (no kinds)",
    )
    acl = sub.add_parser("acl", help="print a Redis role's rules for ACL SETUSER (scoped to QUEUE_PREFIX; no server)")
    acl.add_argument("role", choices=sorted(ROLES), help=", ".join(f"{r.name}: {r.purpose}" for r in ROLES.values()))
    sub.add_parser(
        "migrate",
        help="apply the queue's own tables (the dead-letter archive) to ARCHIVE_URL "
        "(empty: DATABASE_URL, or the embedded PostgreSQL)",
    )
    return parser


def parse_delay(text: str, option: str = "--delay") -> float:
    """``30s``, ``5m``, ``2h`` or a number of seconds (``option``: the flag it came with, for the error)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not match:
        raise SettingsError(f"{option} {text!r} is not a duration; use e.g. 30s, 5m, 2h or 1.5")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


def parse_fields(pairs: Sequence[str]) -> dict[str, str]:
    fields: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SettingsError(f"field {pair!r} is not key=value; e.g. order_id=4471")
        fields[name] = value
    return fields


def cmd_enqueue(settings: Settings, args: argparse.Namespace) -> int:
    fields = parse_fields(args.fields)
    delay_s = parse_delay(args.delay) if args.delay else None
    unique_for = parse_delay(args.unique_for, "--unique-for") if args.unique_for else None
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
            queue=args.queue,
            fair_key=args.fair_key,
            unique_key=args.unique_key,
            unique_for=unique_for,
            job_id=args.job_id,
        )
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
    print(result)
    return EXIT_OK


def cmd_keys(settings: Settings) -> int:
    """One line per served queue and partition: its number, slot and key names, for redis-cli and the docs'
    recipes."""
    for keys in served_keys(settings):
        slot = key_slot(keys.jobs.encode())
        queue = f"queue {keys.queue}  " if settings.queues != (Served(DEFAULT_QUEUE),) else ""
        print(f"{queue}partition {keys.partition}  slot {slot}  {keys.jobs}  {keys.delayed}  {keys.dead}")
    return EXIT_OK


def cmd_migrate(settings: Settings) -> int:
    """Apply the archive's table to ARCHIVE_URL, DATABASE_URL or the embedded PostgreSQL."""
    if not settings.archive_on:
        print("nothing to migrate: the archive is off (ARCHIVE_URL=off)")
        return EXIT_OK
    import psycopg

    from worker.archive.table import migrate_url

    embedded = use_embedded(settings, need_redis=False, need_database=False, need_archive=True)
    configured = settings.current("archive_url") if settings.archive_url else settings.current("database_url")
    try:
        with embedded_stack(
            "", configured, data_dir=Path(settings.data_dir), need_postgres=embedded, need_redis=False
        ) as (
            _redis_url,
            url,
        ):
            migrate_url(url)
    except psycopg.OperationalError as exc:
        print(redact(f"error: the archive's PostgreSQL does not answer: {one_line(exc)}"), file=sys.stderr)
        return EXIT_FAILED
    print("migrated")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return one_line_errors(lambda: command(args))


def command(args: argparse.Namespace) -> int:
    """Run the command ``args`` name with the settings from the environment."""
    overrides = {"kinds": args.kinds} if args.kinds else {}
    if args.processes:
        overrides["processes"] = args.processes
    if args.queues:
        overrides["queues"] = args.queues
    settings = Settings.from_env(**overrides)
    logs.configure(settings.log_format, settings.log_level)
    if args.command == "keys":
        return cmd_keys(settings)
    if args.command == "acl":
        return cmd_acl(settings, args.role)
    if args.command == "enqueue":
        return cmd_enqueue(settings, args)
    if args.command == "health":
        return health(settings)
    if args.command == "migrate":
        return cmd_migrate(settings)
    if args.command == "metrics":
        return serve_backlog(settings)
    return run(settings, burst=args.burst)
