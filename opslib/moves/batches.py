"""What every batch of moves an analyst makes needs: a batch id, and each partition's scripts.

A replay, a discard and a move of delayed jobs each write one batch id on
every entry they move, so that the archive and ``replay_status`` can follow
the batch; the id starts with its time, so batches sort by when they were made.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any

from worker.store.connection import is_cluster
from worker.store.keys import Keys
from worker.store.scripts import Scripts

BATCH_TIME = "%Y%m%dT%H%M%SZ"


def new_batch_id() -> str:
    """A batch id that sorts by time and says when it was made: ``20261130T211400Z-3f9a1c2e``."""
    return f"{datetime.now(UTC):{BATCH_TIME}}-{secrets.token_hex(4)}"


def partition_scripts(client: Any, parts: list[Keys]) -> list[Scripts]:
    """Each partition's scripts, loaded on every primary first on a cluster (whose pipelines send
    EVALSHA as it is)."""
    scripts = [Scripts(client, keys) for keys in parts]
    if is_cluster(client):
        scripts[0].load(client)
    return scripts
