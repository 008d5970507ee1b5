"""``make run``: the demo night, from a fresh clone, until Ctrl-C.

Starts what is unset of Valkey and PostgreSQL (embedded, under
``WORKER_DATA_DIR``; set ``REDIS_URL`` / ``DATABASE_URL`` to use yours),
migrates, starts the mail and Payrail stand-ins on 127.0.0.1, loads the night
(into the embedded database it first empties Stagedoor's tables; into yours
it only adds), and runs one production worker, ``python -m worker``, as a
child. Beside it, a rolling deploy of one kind runs on a prefix of its own
(:mod:`stagedoor.demo.rollout`) and its summary is logged. Every 20 s it
says where the night stands. Ctrl-C (or SIGTERM) stops the worker (running
jobs may finish), the stand-ins and the servers it started, in that order;
a child it started also dies with it if it is killed.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

import psycopg
import redis

from stagedoor.demo.night import Night
from stagedoor.demo.rollout import run_rollout
from stagedoor.demo.session import DemoNight, stop_worker
from stagedoor.queues import WORKER_QUEUES
from worker.embedded.servers import embedded_stack
from worker.errors import SettingsError, WorkerError
from worker.observability import logs
from worker.settings import Settings
from worker.store.keys import GROUP, Keys
from worker.store.queues import parse_served

log = logging.getLogger("stagedoor.demo")

STATUS_INTERVAL_S = 20.0


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def status_line(demo: DemoNight, night: Night, client: redis.Redis) -> str:
    """Where the night stands, in one sentence."""
    keys = Keys(demo.prefix)
    with psycopg.connect(demo.database_url, autocommit=True) as conn:
        unpublished, rendered, holds, issues = conn.execute(
            "SELECT (SELECT count(*) FROM outbox WHERE published_at IS NULL),"
            " (SELECT count(*) FROM tickets WHERE rendered_at IS NOT NULL),"
            " (SELECT count(*) FROM holds), (SELECT count(*) FROM reconciliation_issues)"
        ).fetchone()  # type: ignore[misc]
    queues = [Keys(keys.prefix, queue=served.name) for served in parse_served(WORKER_QUEUES)]
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        pipe.xpending(queue.jobs, GROUP)
        pipe.zcard(queue.delayed)
        pipe.xlen(queue.dead)
    replies = pipe.execute()
    running = sum(int(reply["pending"]) for reply in replies[0::3])
    delayed, dead = sum(replies[1::3]), sum(replies[2::3])
    by_queue = ", ".join(f"{q.queue} {n}" for q, n in zip(queues, replies[2::3], strict=True))
    failed = sum(n for status, n in demo.mail.answered.items() if status >= 500)
    return (
        f"outbox {unpublished} unpublished; jobs {running} running, {delayed} delayed; "
        f"{dead} dead letters ({by_queue}); tickets of {rendered}/{len(night.paid_orders)} orders rendered; "
        f"{len(demo.mail.messages())} emails sent ({failed} sends answered 503); {holds} holds left; "
        f"{issues} reconciliation issues."
    )


def _brief(demo: DemoNight, night: Night) -> None:
    log.info(
        "Loaded the night: %d organizers, %d events, %d seats, %d holds (%d expired already, then about two a "
        "minute), %d paid orders with %d outbox rows; Payrail's stand-in has %s's payments with 4 planted "
        "mismatches.",
        len(night.organizers),
        len(night.events),
        night.seats,
        night.holds,
        night.holds_expired_at_load,
        len(night.paid_orders),
        night.outbox_rows,
        night.payrail_day,
    )
    log.info(
        "Watch for: the relay publishing the outbox; %d sends answered 503 and retried; expire_holds each minute; "
        "reconcile_payments finding the 4 mismatches; and the 40 render_tickets jobs of Klub Kotelna's balcony "
        "(seats labelled like 14-C) dead-lettered with attempts 2. Ctrl-C stops everything.",
        demo.mail_failures,
    )
    log.info(
        "Stand-ins: mail %s (GET /_stand-in/messages), Payrail %s. Redis %s, PostgreSQL %s.",
        demo.mail.url,
        demo.payrail.url,
        demo.redis_url,
        demo.database_url,
    )


def main() -> int:
    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    logs.configure(settings.log_format, settings.log_level)
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    worker: subprocess.Popen[bytes] | None = None
    try:
        with (
            embedded_stack(
                settings.redis_url,
                settings.database_url,
                data_dir=Path(settings.data_dir).resolve(),
                need_postgres=True,
            ) as (redis_url, database_url),
            DemoNight(database_url, redis_url, prefix=settings.prefix, next_week=True) as demo,
        ):
            if not settings.redis_url:
                log.info("REDIS_URL is unset: started the embedded Valkey at %s.", redis_url)
            if not settings.database_url:
                log.info("DATABASE_URL is unset: started the embedded PostgreSQL at %s.", database_url)
            night = demo.load(reset=not settings.database_url)
            _brief(demo, night)
            client = redis.Redis.from_url(redis_url)
            worker = demo.start_worker()
            try:
                log.info("%s", run_rollout(demo, client).summary())
                while worker.poll() is None:
                    deadline = time.monotonic() + STATUS_INTERVAL_S
                    while worker.poll() is None and time.monotonic() < deadline:
                        time.sleep(0.2)
                    if worker.poll() is None:
                        log.info("Night so far: %s", status_line(demo, night, client))
            except KeyboardInterrupt:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                log.info("Stopping: the worker first, then the stand-ins and the servers this started.")
                stop_worker(worker, settings.shutdown_grace_s)
                log.info("The night ended with: %s", status_line(demo, night, client))
            client.close()
            if worker.returncode not in (0, -signal.SIGINT):
                log.error("The worker exited with %s.", worker.returncode)
                return 1
    except KeyboardInterrupt:
        if worker is not None:
            stop_worker(worker, settings.shutdown_grace_s)
        return 0
    except (WorkerError, psycopg.Error, redis.RedisError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    log.info("Stopped. Nothing this started is left running.")
    return 0
