"""Where one call of opslib acts: the servers the caller named, and the session a move runs in.

Every public function takes ``client=`` (a Redis client), ``prefix=`` (the
queue's ``QUEUE_PREFIX``) and, where it may reach the archive, ``conn=`` (a
psycopg connection or URL); each None means the environment's
(:mod:`opslib.connection`). :class:`Servers` holds the three as the caller
gave them, so that a function hands one record down instead of three
arguments; :func:`with_servers` turns the public call form into it.
:meth:`Servers.session` opens them for one call: a :class:`Session` carries
the Redis client, the queue's keys, its partitions, their scripts and the
archive's connection (opened when first needed), and closes what it opened.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar

import psycopg

from opslib.actions import Action, record_action
from opslib.connection import partitions, redis_session
from opslib.errors import OpslibError
from opslib.moves.archived import Archive, apply_pending_log, open_archive
from opslib.moves.batches import partition_scripts
from worker.store.keys import Keys
from worker.store.scripts import Scripts

R = TypeVar("R")


@dataclass(frozen=True)
class Servers:
    """The servers a caller named (``client=``, ``prefix=``, ``conn=``), None for the environment's."""

    client: Any = None
    prefix: str | None = None
    conn: Any = None

    @contextlib.contextmanager
    def session(self, action: str, needs: str = "") -> Iterator[Session]:
        """The servers opened for ``action`` (what the caller does, for error messages); ``needs``
        says which rights a move needs (none: a read). What was opened here is closed afterwards."""
        with (
            redis_session(self.client, self.prefix, action, needs) as (client, keys),
            open_archive(self.conn) as archive,
        ):
            yield Session(client, keys, archive, self.conn)


@dataclass
class Session:
    """One call's open servers: the Redis client, the queue's keys, the archive (:class:`Archive`)."""

    client: Any
    keys: Keys
    archive: Archive
    conn: Any = None

    @cached_property
    def parts(self) -> list[Keys]:
        """The keys of every partition of the queue (read once per call)."""
        return partitions(self.client, self.keys)

    @cached_property
    def scripts(self) -> list[Scripts]:
        """Each partition's scripts, in partition order."""
        return partition_scripts(self.client, self.parts)

    @property
    def servers(self) -> Servers:
        """These servers, for a public function called inside the session (it opens nothing again)."""
        return Servers(self.client, self.keys.prefix, self.conn)

    def record(self, done: Action) -> None:
        """Record an operator's action on this queue (:func:`opslib.actions.record_action`)."""
        record_action(self.client, self.keys, done)

    def settle_archive(self) -> None:
        """Apply the move's records in ``jobs:dead:log`` to the archive before the call returns, so that psql,
        Grafana and ``opslib.sql`` show a replay, discard or cancel at once, not when a worker's archiver
        next runs. Best effort: with PostgreSQL away the archiver applies them later."""
        if not self.archive.enabled:
            return
        try:
            pg = self.archive.connection()
        except (OpslibError, psycopg.Error):
            return
        if pg is not None:
            apply_pending_log(pg, client=self.client, prefix=self.keys.prefix)


#: The public call form's last three keywords, as ``help()`` shows them.
SERVER_PARAMETERS = [
    inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=shown)
    for name, shown in (("client", "redis.Redis | None"), ("prefix", "str | None"), ("conn", "Any"))
]


def with_servers(function: Callable[..., R]) -> Callable[..., R]:
    """``function`` in its public call form: its own parameters, and ``client=``, ``prefix=`` and
    ``conn=`` in place of its keyword ``servers`` (one :class:`Servers` of the three). The signature
    shown (``help()``, Jupyter) is the public one."""
    own = inspect.signature(function)
    public = [p for p in own.parameters.values() if p.name != "servers" and p.kind != p.VAR_KEYWORD]
    public += _unpacked(function)

    @functools.wraps(function)
    def call(*args: Any, client: Any = None, prefix: str | None = None, conn: Any = None, **given: Any) -> R:
        return function(*args, servers=Servers(client, prefix, conn), **given)

    call.__signature__ = own.replace(parameters=[*public, *SERVER_PARAMETERS])  # type: ignore[attr-defined]
    return call


def _unpacked(function: Callable[..., Any]) -> list[inspect.Parameter]:
    """The keywords of a ``**options: Unpack[SomeTypedDict]`` of ``function``, each shown as a keyword
    of its own (default None), so that ``help()`` names them (``replay_kind``'s filters)."""
    rest = [p for p in inspect.signature(function).parameters.values() if p.kind == p.VAR_KEYWORD]
    unpacked = re.fullmatch(r"Unpack\[(\w+)\]", str(rest[0].annotation)) if rest else None
    if unpacked is None:
        return []
    options = function.__globals__[unpacked[1]].__annotations__
    return [
        inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=getattr(shown, "__forward_arg__", shown)
        )
        for name, shown in options.items()
    ]
