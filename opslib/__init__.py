"""opslib: the queue's state as pandas DataFrames, for analysts in Jupyter.

Read: :func:`dead_letters`, :func:`pending`, :func:`pending_counts`,
:func:`delayed`, :func:`queue_stats`, :func:`failure_groups`, :func:`sql`
(:mod:`opslib.queries` lists every column and dtype). The past, from the
dead-letter archive in PostgreSQL: :func:`archive`, :func:`history` and
:func:`plot_history` (:mod:`opslib.archive`). The flow per kind and minute, from the workers'
counters: :func:`throughput` and :func:`plot_throughput` (:mod:`opslib.flow`). Act:
:func:`replay`, :func:`replay_kind`, and follow up with
:func:`replay_status` (:mod:`opslib.moves.replay`); :func:`discard`,
:func:`discard_kind` (:mod:`opslib.moves.discard`). One dead letter whole: :func:`show`. Delayed jobs: :func:`run_now`,
:func:`cancel_delayed` (:mod:`opslib.moves.delayed_jobs`). A data
fix previewed before it commits: :func:`transaction`. Times are shown in the zone of
:func:`set_display_tz` (or ``OPSLIB_TZ``) while the data stays in UTC (:mod:`opslib.display`).
Where a job is now, by job id, entry id, outbox id or payload value: :func:`find`
(:mod:`opslib.find`). During an incident: :func:`kinds` (who runs what, and what is held back), :func:`pause`,
:func:`resume`, :func:`throttle` (:mod:`opslib.moves.incident`), and :func:`actions`, every
operator action in order (:mod:`opslib.actions`). A dashboard for notebooks and Voilà (a tab per state, every
view in the page's URL): :func:`opslib.panel.dashboard.dashboard`; its dead tab alone:
:func:`opslib.panel.widgets.dead_letter_panel`. On a terminal: ``python -m opslib``.

Each function takes ``client=`` (and ``prefix=``) or finds the servers from
the environment (``REDIS_URL``, ``DATABASE_URL``, ``ARCHIVE_URL``, ``QUEUE_PREFIX``) or from a
running ``make run``. Every error raised on purpose is an :class:`OpslibError`.
"""

from opslib.actions import actions
from opslib.archive import archive, history
from opslib.display import install_formatter, set_display_tz
from opslib.errors import OpslibError
from opslib.find import find
from opslib.flow import throughput
from opslib.kinds import kinds
from opslib.moves.cancel import cancel
from opslib.moves.delayed_jobs import cancel_delayed, run_now
from opslib.moves.discard import discard, discard_kind
from opslib.moves.incident import pause, resume, throttle
from opslib.moves.replay import replay, replay_kind, replay_status
from opslib.plots import plot_history, plot_throughput
from opslib.queries import (
    QueueStats,
    dead_letters,
    delayed,
    failure_groups,
    pending,
    pending_counts,
    queue_stats,
    sql,
)
from opslib.show import show
from opslib.signatures import signature
from opslib.transaction import transaction

__all__ = [
    "OpslibError",
    "QueueStats",
    "actions",
    "archive",
    "cancel",
    "cancel_delayed",
    "dead_letters",
    "delayed",
    "discard",
    "discard_kind",
    "failure_groups",
    "find",
    "history",
    "kinds",
    "pause",
    "pending",
    "pending_counts",
    "plot_history",
    "plot_throughput",
    "queue_stats",
    "replay",
    "replay_kind",
    "replay_status",
    "resume",
    "run_now",
    "set_display_tz",
    "show",
    "signature",
    "sql",
    "throttle",
    "throughput",
    "transaction",
]

install_formatter()
