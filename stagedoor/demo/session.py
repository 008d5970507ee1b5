"""A demo night with its stand-ins, and the workers that run it: for ``make run`` and tests.

::

    with DemoNight(database_url, redis_url, prefix=prefix) as demo:
        night = demo.load()          # migrate, load the night, brief the stand-ins
        log = demo.run_to_end()      # python -m worker --burst until jobs and outbox are drained
        # now: 40 render_tickets dead letters (attempts 2, SeatLabelInvalid), the rest done

:meth:`DemoNight.run_to_end` can run again after a data fix and a replay
(``UPDATE seats SET label = replace(label, '-', '')``, then replay the dead
render_tickets): the 40 renders succeed and their "tickets ready" emails go
through the relay. :meth:`DemoNight.worker_env` gives the environment of a
worker process for this night, to start workers yourself.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from datetime import datetime
from typing import Self

import psycopg
import redis

from stagedoor.demo.night import Night, clear_night, load_night
from stagedoor.queues import WORKER_QUEUES
from stagedoor.schema import migrate_url
from stagedoor.standins import start_mail, start_payrail
from worker.archive.table import migrate_url as migrate_archive
from worker.embedded.servers import die_with_parent
from worker.store.enqueue import enqueue

log = logging.getLogger("stagedoor.demo")

#: How many sends the mail stand-in answers 503 to at the start of the night.
MAIL_FAILURES = 3


class DemoNight:
    """The stand-ins (started on enter, stopped on exit) and the night's data and jobs."""

    def __init__(
        self,
        database_url: str,
        redis_url: str,
        *,
        prefix: str = "",
        mail_failures: int = MAIL_FAILURES,
        next_week: bool = False,
        now: datetime | None = None,
    ) -> None:
        self.database_url = database_url
        self.redis_url = redis_url
        self.prefix = prefix
        self.mail_failures = mail_failures
        self.next_week = next_week
        self.now = now
        self.mail = start_mail()
        try:
            self.payrail = start_payrail()
        except BaseException:
            self.mail.stop()
            raise
        self.night: Night | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.mail.stop()
        self.payrail.stop()

    def load(self, *, reset: bool = False) -> Night:
        """Migrate (Stagedoor's tables and the archive's, as ``python -m stagedoor migrate`` and
        ``python -m worker migrate`` do: workers given a URL do not create tables), (with ``reset``)
        empty Stagedoor's tables and this queue's archive and actions (a fresh night), load the night,
        brief the stand-ins, and enqueue one
        reconcile_payments (for yesterday) and one expire_holds."""
        migrate_url(self.database_url)
        migrate_archive(self.database_url)
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            if reset:
                clear_night(conn, self.prefix)
                log.info("A fresh night: Stagedoor's tables, the archive and the operators' actions were emptied.")
            else:
                log.info(
                    "Earlier nights are kept in this database: the archive and the operators' actions hold them "
                    "too (order ids go on from the last); read this night with since=, e.g. since='today'."
                )
            night = load_night(conn, now=self.now, next_week=self.next_week)
        self.payrail.set_payments(night.payrail_day, night.payrail_payments)
        self.mail.fail_next(self.mail_failures)
        client = redis.Redis.from_url(self.redis_url)
        try:
            enqueue(client, "reconcile_payments", {"day": night.payrail_day}, prefix=self.prefix)
            enqueue(client, "expire_holds", prefix=self.prefix)
        finally:
            client.close()
        self.night = night
        return night

    def worker_env(self, **extra: str) -> dict[str, str]:
        """The environment of a worker process for this night."""
        env = {
            **os.environ,
            "REDIS_URL": self.redis_url,
            "DATABASE_URL": self.database_url,
            "QUEUE_PREFIX": self.prefix,
            "MAIL_API_URL": self.mail.url,
            "PAYRAIL_URL": self.payrail.url,
            "WORKER_KINDS": "stagedoor.kinds",
            "WORKER_QUEUES": WORKER_QUEUES,
        }
        env.update(extra)
        return env

    def start_worker(self, *args: str, **extra: str) -> subprocess.Popen[bytes]:
        """Start ``python -m worker [args]`` for this night; it dies with this process."""
        return subprocess.Popen(
            [sys.executable, "-m", "worker", *args],
            env=self.worker_env(**extra),
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )

    def run_to_end(self, timeout_s: float = 120.0, **extra: str) -> str:
        """Run ``python -m worker --burst`` until the jobs, the delayed set and the outbox
        are drained; return its log. Raises RuntimeError if it fails or times out."""
        try:
            done = subprocess.run(
                [sys.executable, "-m", "worker", "--burst"],
                env=self.worker_env(**extra),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=timeout_s,
                preexec_fn=die_with_parent,
            )
        except subprocess.TimeoutExpired as exc:
            out = exc.output.decode(errors="replace") if isinstance(exc.output, bytes) else exc.output or ""
            raise RuntimeError(f"python -m worker --burst did not finish within {timeout_s} s:\n{out}") from None
        if done.returncode != 0:
            raise RuntimeError(f"python -m worker --burst exited {done.returncode}:\n{done.stdout}")
        return done.stdout


def stop_worker(worker: subprocess.Popen[bytes], grace_s: float) -> None:
    """Stop a worker this started as Ctrl-C would (running jobs may finish), killing it ``grace_s`` + 5 s later."""
    if worker.poll() is None:
        worker.send_signal(signal.SIGINT)
        try:
            worker.wait(grace_s + 5)
        except subprocess.TimeoutExpired:
            log.warning("The worker did not stop within %.0f s; killing it.", grace_s + 5)
            worker.kill()
            worker.wait()
