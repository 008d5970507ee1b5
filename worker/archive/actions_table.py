"""The operators' audit: PostgreSQL table ``operator_actions``, beside the dead-letter archive.

One row per operator action (``opslib.replay``, ``discard``, ``pause``,
``resume``, ``throttle``, ``run_now``, ``cancel_delayed``, from Python, the
CLI or the panel), written by opslib; while PostgreSQL is away the record
waits in Redis (``actions:log``) and the next opslib call that reaches
PostgreSQL applies it (the ``id`` keeps that idempotent).

=========  ===================================================================
column     holds
=========  ===================================================================
queue      the queue's key prefix
id         the record's id (unique per queue)
at         when the action was taken
by         who: ``by=``, else the operating-system user
action     replay | discard | pause | resume | throttle | run_now | cancel_delayed
kind       the kind acted on ('' when the entries' kinds were mixed)
entries    how many entries it moved (0 for pause and throttle)
reason     why, as given ('' when none)
batch      the batch id of the move ('' for pause, resume and throttle)
detail     what else the action carries (a throttle's rate), JSON
=========  ===================================================================

Created by the same migration as the archive (:func:`worker.archive.table.migrate`), partitioned by
month of ``at`` as the archive is by ``dead_at`` (:mod:`worker.archive.months`).
"""

from __future__ import annotations

ACTIONS_TABLE = "operator_actions"

ACTIONS_DDL = f"""
CREATE TABLE IF NOT EXISTS {ACTIONS_TABLE} (
    queue    text        NOT NULL,
    id       text        NOT NULL,
    at       timestamptz NOT NULL,
    by       text        NOT NULL DEFAULT '',
    action   text        NOT NULL,
    kind     text        NOT NULL DEFAULT '',
    entries  integer     NOT NULL DEFAULT 0,
    reason   text        NOT NULL DEFAULT '',
    batch    text        NOT NULL DEFAULT '',
    detail   jsonb       NOT NULL DEFAULT '{{}}',
    PRIMARY KEY (queue, id, at)
) PARTITION BY RANGE (at);
CREATE TABLE IF NOT EXISTS {ACTIONS_TABLE}_default PARTITION OF {ACTIONS_TABLE} DEFAULT;
"""
ACTIONS_INDEX_DDL = f"""
CREATE INDEX IF NOT EXISTS {ACTIONS_TABLE}_at ON {ACTIONS_TABLE} (queue, at);
"""
