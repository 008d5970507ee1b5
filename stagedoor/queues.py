"""Stagedoor's named queues, and the ``WORKER_QUEUES`` its workers serve them with.

A sale's confirmation emails must not wait behind the 03:00 reconciliation
that walks every payment of the day: the emails and reminders are in
``critical``, the ticket renders and hold expiries in ``default``, the
reconciliation and the purges in ``bulk``. Under saturation a worker starts
six critical jobs for three default and one bulk; a queue with nothing ready
leaves its share to the others (docs/worker.md, "Queues and weights"). The
image, compose.yaml, the Kubernetes deployment and the demo night set
``WORKER_QUEUES`` to :data:`WORKER_QUEUES`.
"""

from __future__ import annotations

CRITICAL = "critical"
BULK = "bulk"

#: What Stagedoor's workers serve, with weights.
WORKER_QUEUES = "critical:6,default:3,bulk:1"
