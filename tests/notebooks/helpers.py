"""A fresh stack with the demo night, for the notebooks (nbval) and the panel's browser test.

:class:`Servers` is this machine's Redis and PostgreSQL when ``REDIS_URL`` /
``DATABASE_URL`` are set, or embedded ones started in a temp folder. Each
:class:`NightStack` then has a key prefix and a PostgreSQL schema of its own,
loads the demo night into them as ``make run`` does (``stagedoor.demo``,
with next week's reminders), starts one worker, and waits until the night
has settled: the outbox published, nothing pending, undelivered or due within
the hour, and the 40 render_tickets dead letters in ``jobs:dead`` and in the
archive (the runbook and the stories read both). The worker
keeps running beside the notebook, so that a replay's jobs run. It is named
``worker-1``, its scheduler is off and the mail stand-in fails no send, so the
numbers a notebook shows are the same on every run. :meth:`NightStack.env` is
what a notebook kernel or Voilà gets: ``REDIS_URL``, ``DATABASE_URL`` (with its
schema), ``QUEUE_PREFIX``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
import redis

import opslib
from stagedoor.demo import DemoNight
from tests.helpers import with_schema
from worker.embedded.servers import EmbeddedServer, die_with_parent, start_postgres, start_redis
from worker.store.keys import Keys

WORKER_NAME = "worker-1"
ARCHIVED = "SELECT count(*) FROM dead_letters WHERE queue = %s"
PREVIOUS_ACTION = (
    "INSERT INTO operator_actions (queue, id, at, by, action, kind, entries, reason, batch, detail) "
    "VALUES (%s, 'previous-night', now() - interval '1 day', 'ana', 'replay', 'render_tickets', 40, "
    "'the previous night', '', '{}')"
)


#: Notebooks run on the second night of their stack, as after a second ``make run``: the first night's
#: archive and actions must not leak into what they count (one notebook only: a night costs CI time).
SECOND_NIGHT = {"barcode_failures.ipynb"}


def nights_for(notebook: Path) -> int:
    """How many nights the stack of ``notebook`` runs before it (nbval and ``refresh_outputs`` alike)."""
    return 2 if notebook.name in SECOND_NIGHT else 1


class Servers:
    """Redis and PostgreSQL for the notebooks: from the environment, or embedded (stopped by :meth:`stop`)."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="stagedoor-notebooks-"))
        self.started: list[EmbeddedServer] = []
        self.redis_url = os.environ.get("REDIS_URL", "")
        self.database_url = os.environ.get("DATABASE_URL", "")
        try:
            if not self.redis_url:
                self.started.append(start_redis(self.folder / "valkey"))
                self.redis_url = self.started[-1].url
            if not self.database_url:
                self.started.append(start_postgres(self.folder / "postgres"))
                self.database_url = self.started[-1].url
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for server in reversed(self.started):
            server.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


class NightStack:
    """One demo night in its own prefix and schema, settled, with a worker beside it (its log in ``log_path``)."""

    def __init__(self, redis_url: str, database_url: str, log_path: Path, *, nights: int = 1) -> None:
        self.redis_url = redis_url
        self.server_database_url = database_url
        self.prefix = f"nb:{uuid.uuid4().hex[:10]}:"
        self.schema = f"nb_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{self.schema}"')
        self.database_url = with_schema(database_url, self.schema)
        self.log_path = log_path
        self.demo: DemoNight | None = None
        self.worker: subprocess.Popen[bytes] | None = None
        try:
            self.demo = DemoNight(self.database_url, redis_url, prefix=self.prefix, mail_failures=0, next_week=True)
            for night in range(nights):
                if night:
                    self.end_night()
                self.night = self.demo.load(reset=nights > 1)
                self.start_worker()
                self.wait_until_settled()
        except BaseException:
            self.stop()
            raise

    def start_worker(self) -> None:
        assert self.demo is not None
        with open(self.log_path, "ab") as log:
            self.worker = subprocess.Popen(
                [sys.executable, "-m", "worker"],
                env=self.demo.worker_env(SCHEDULER="off", WORKER_NAME=WORKER_NAME),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
            )

    def end_night(self) -> None:
        """End a settled night as ``make run``'s Ctrl-C does, leaving what a second ``make run`` finds: its
        dead letters archived, an operator's action on record, and Redis empty (the embedded Valkey is not
        saved). The next :meth:`DemoNight.load` with ``reset`` must leave none of it (a fresh night)."""
        self.stop_worker()
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            conn.execute(PREVIOUS_ACTION, (self.prefix,))
        self.drop_keys()

    def state(self) -> dict[str, int]:
        """The numbers that say whether the night has settled."""
        keys = Keys(self.prefix)
        client = redis.Redis.from_url(self.redis_url)
        try:
            stats = opslib.queue_stats(client=client, prefix=self.prefix)
            soon = client.zcount(keys.delayed, "-inf", time.time() + 3600)
        finally:
            client.close()
        with psycopg.connect(self.database_url) as conn:
            unpublished = conn.execute("SELECT count(*) FROM outbox WHERE published_at IS NULL").fetchone()
        return {
            "archived dead letters": self.archived(),
            "dead": stats.dead,
            "pending": stats.pending,
            "lag": stats.lag,
            "delayed within the hour": int(soon),
            "unpublished outbox rows": int(unpublished[0]) if unpublished else 0,
        }

    def archived(self) -> int:
        """The night's rows in the archive the worker writes (``ARCHIVE_URL``, else the night's database)."""
        url = os.environ.get("ARCHIVE_URL") or self.database_url
        with psycopg.connect(url) as conn:
            found = conn.execute("SELECT to_regclass('dead_letters') IS NOT NULL").fetchone()
            counted = conn.execute(ARCHIVED, (self.prefix,)).fetchone() if found and found[0] else None
        return int(counted[0]) if counted else 0

    def wait_until_settled(self, timeout_s: float = 120.0) -> None:
        dead = len(self.night.bad_orders)
        archived = 0 if os.environ.get("ARCHIVE_URL") == "off" else dead
        settled = {"archived dead letters": archived, "dead": dead, "pending": 0, "lag": 0}
        settled |= {"delayed within the hour": 0, "unpublished outbox rows": 0}
        deadline = time.monotonic() + timeout_s
        while (state := self.state()) != settled:
            if self.worker is not None and self.worker.poll() is not None:
                raise RuntimeError(f"the demo night's worker exited with {self.worker.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                problem = f"the demo night did not settle within {timeout_s} s: {state}, expected {settled}"
                raise RuntimeError(f"{problem}\n{self.log_tail()}")
            time.sleep(0.2)

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def env(self) -> dict[str, str]:
        """What a notebook needs to find this night: the servers and the prefix."""
        return {"REDIS_URL": self.redis_url, "DATABASE_URL": self.database_url, "QUEUE_PREFIX": self.prefix}

    def stop_worker(self) -> None:
        if self.worker is not None and self.worker.poll() is None:
            self.worker.send_signal(signal.SIGTERM)
            try:
                self.worker.wait(30)
            except subprocess.TimeoutExpired:
                self.worker.kill()
                self.worker.wait()

    def stop(self) -> None:
        """Stop the worker and the stand-ins; drop the schema and the keys."""
        self.stop_worker()
        if self.demo is not None:
            self.demo.stop()
        with psycopg.connect(self.server_database_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
        self.drop_keys()

    def drop_keys(self) -> None:
        """Delete this night's keys (its own prefix) from Redis."""
        client = redis.Redis.from_url(self.redis_url)
        try:
            for key in client.scan_iter(match=f"{self.prefix}*", count=1000):
                client.delete(key)
        finally:
            client.close()
