"""``python -m worker acl ROLE``: a Redis role's rules, ready for ``ACL SETUSER`` (:mod:`worker.store.roles`).

Printed on one line, each rule quoted for a POSIX shell, to paste after
``redis-cli ACL SETUSER <name> on '>password'``. No server is asked: the
rules depend only on ``QUEUE_PREFIX`` (the keys) and ``WAIT_REPLICAS``.
"""

from __future__ import annotations

import shlex
import sys

from worker.settings import Settings
from worker.store.roles import ROLES


def cmd_acl(settings: Settings, role: str) -> int:
    """Print ``role``'s rules for the configured queue; warn on stderr when the prefix is empty."""
    if not settings.prefix:
        print(
            "warning: QUEUE_PREFIX is empty, so these rules reach every key of the database; "
            "set QUEUE_PREFIX (e.g. myapp:) on the workers, opslib and here",
            file=sys.stderr,
        )
    rules = ROLES[role].rules(settings.prefix, wait_replicas=settings.wait_replicas)
    print(" ".join(shlex.quote(rule) for rule in rules))
    return 0
