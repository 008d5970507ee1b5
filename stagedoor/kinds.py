"""Stagedoor's job kinds, schedules and lifespan: the default ``WORKER_KINDS`` module.

Importing this module registers every kind (each declared next to its handler,
with its retry policy and schedule) and the lifespan that, at worker start,
migrates the schema (with ``STAGEDOOR_MIGRATE`` off, checks it), opens the
connection pool and the HTTP client, and adds the outbox relay chore (which
``--burst`` also waits for).

=======================  =====================  =========================  ========
kind                     retries                schedule                   catch-up
=======================  =====================  =========================  ========
expire_holds             none                   every 60 s                 1 tick
purge_idempotency_keys   none                   ``0 * * * *`` (hourly)     1 tick
purge_outbox             none                   ``30 3 * * *`` (03:30)     1 tick
reconcile_payments       none                   ``0 3 * * *`` (03:00)      none
send_email               5, 1 s doubling to 60  outbox                     -
send_reminder            5, 1 s doubling to 60  outbox, delayed            -
render_tickets           1                      outbox                     -
=======================  =====================  =========================  ========

render_tickets has a timeout of 60 s (``RENDER_TIMEOUT_S``); a render stopped then, by a cancel
or by the worker's shutdown stops before its next page (:mod:`stagedoor.tickets`).
Cron times are in ``SCHEDULE_TZ`` (default UTC). send_email and send_reminder
give up on ``MailRejected`` (the provider's 4xx refusal): such a job is
dead-lettered at once with reason ``permanent``, whatever retries remain.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from stagedoor import holds, mail, purges, reconcile, tickets  # noqa: F401 - each registers its kinds
from stagedoor.context import open_context
from stagedoor.outbox import RELAY_INTERVAL_S, OutboxRelay
from stagedoor.schema import check_url, migrate_url
from stagedoor.settings import StagedoorSettings
from worker import Chore, WorkerApp, lifespan
from worker.store.keys import Keys


@lifespan(needs_database=True)
async def stagedoor(app: WorkerApp) -> AsyncIterator[None]:
    own = StagedoorSettings.from_env()
    # DDL only where this worker may run it (the embedded stack, or STAGEDOOR_MIGRATE=on); else a check.
    prepare = migrate_url if own.migrates(bool(app.settings.database_url)) else check_url
    await asyncio.to_thread(prepare, app.database_conninfo())
    async with open_context(
        app.database_conninfo,
        mail_api_url=own.mail_api_url,
        payrail_url=own.payrail_url,
        pool_size=app.settings.concurrency + 2,
        pool_timeout_s=own.db_pool_timeout_s,
    ) as ctx:
        relay = OutboxRelay(ctx.pool, app.redis, Keys(app.settings.prefix))
        app.add_chore(Chore("outbox-relay", RELAY_INTERVAL_S, relay.run))
        app.add_more_work(relay.has_unpublished)
        yield
