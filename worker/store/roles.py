"""The three Redis roles, declared once: the commands each may run and the keys it may touch.

``python -m worker acl ROLE`` prints a role's rules for ``ACL SETUSER``, one
line quoted for a shell, to paste after ``redis-cli ACL SETUSER myapp-worker on '>secret'``.

========  ==================================================================
role      may
========  ==================================================================
worker    run jobs: read and acknowledge entries, retry, dead-letter, hand
          dead letters to the archive, promote delayed jobs, tick the
          scheduler, hold the metrics lock, beat (``workers``), add to the
          flow counters, enqueue (fair keys too), publish its kinds, park a
          paused kind's jobs, move fair jobs onto ``jobs``, take a throttled
          kind's tokens, hear cancels (SUBSCRIBE to the queue's ``cancel``
          channel);
          ``WAIT`` when ``WAIT_REPLICAS`` > 0
operator  every read of the analyst, and the moves of opslib: replay,
          discard, run_now, cancel_delayed, cancel (PUBLISH on ``cancel``),
          pause, resume, throttle (and
          the record of each action)
analyst   read: every query of opslib (dead letters, pending, delayed,
          queue_stats, replay_status, throughput, find, dry runs), health, and what
          ``connect()`` asks (INFO, the cluster's topology)
========  ==================================================================

Every role is scoped to the queue's keys (``~<QUEUE_PREFIX>*``; the analyst's
``%R~``: read only), so the recipes need a prefix: with an empty one a role
reaches every key of the database. Commands that the moves' Lua scripts run
count too (Redis checks them against the caller), so a role that runs a
script lists what the script calls. A new move (a lever of the operator) adds
its script's commands to :data:`OPERATOR_MOVES`; a new chore of the worker, to
:data:`WORKER_WRITES`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import redis.exceptions

#: What every client of the queue sends: redis-py's hand-shake (HELLO; no CLIENT SETINFO, see
#: :data:`worker.store.connection.QUIET`), INFO (connect()), a cluster's topology.
CONNECTION = (
    "hello",
    "ping",
    "select",
    "info",
    "command",
    "asking",
    "cluster|info",
    "cluster|slots",
    "cluster|shards",
    "cluster|nodes",
)
#: Every read of the queue's state (opslib's queries, health, the metrics gauges).
READS = (
    "get",
    "exists",
    "hgetall",
    "hget",
    "hmget",
    "hexists",
    "hvals",
    "smembers",
    "xlen",
    "xrange",
    "xrevrange",
    "xpending",
    "xinfo|groups",
    "xinfo|consumers",
    "xinfo|stream",
    "zcard",
    "zcount",
    "zrange",
    "zrangebyscore",
    "zscore",
    "zscan",
    "hscan",
)
#: Running the moves (worker/store/lua), loaded once per client; EVAL for a move that waits for replicas.
SCRIPTS = ("evalsha", "eval", "script|load", "script|exists")
#: The worker's writes, its own and those of the scripts it runs (and redis-py's lock, for the metrics lock;
#: HINCRBY, EXPIREAT, SADD for the flow counters; ZPOPMIN and HDEL for the fair keys' scripts; GET, SET EX,
#: HSET, PEXPIREAT of the unique keys and the marks of producers' job ids).
WORKER_WRITES = (
    "xadd",
    "xack",
    "xdel",
    "xtrim",
    "xreadgroup",
    "xautoclaim",
    "xclaim",
    "xgroup|create",
    "xgroup|delconsumer",
    "zadd",
    "zrem",
    "zremrangebyscore",
    "zpopmin",
    "set",
    "del",
    "incrby",
    "hset",
    "hdel",
    "hincrby",
    "sadd",
    "expire",
    "expireat",
    "pexpire",
    "pexpireat",
    "pttl",
    "time",
)
#: The writes of opslib's moves (replay, discard, run_now, cancel_delayed, replay from the archive; pause,
#: resume and throttle: HSET/HDEL of the pauses and rates, DEL of a bucket, unpark, the release of the
#: throttled jobs through promote, which parks a paused kind's with ZADD; XTRIM of the applied dead log).
#: A cancel: XDEL and HSET in cancel_entry, and PUBLISH on the queue's cancel channel; the release of a
#: cancelled job's unique key (DEL, or PEXPIREAT while its ``unique_for`` runs).
OPERATOR_MOVES = (
    "xadd", "xdel", "xtrim", "zadd", "zrem", "hset", "hdel", "del", "expire", "pexpireat", "time", "publish"
)  # fmt: skip
#: A worker hears cancels on the queue's cancel channel (the only channel a role may use).
LISTEN = ("subscribe", "unsubscribe", "ping")


@dataclass(frozen=True)
class Role:
    """A Redis role: what it is for, the commands it may run, and whether it may write its keys."""

    name: str
    purpose: str
    commands: tuple[str, ...]
    writes: bool

    def rules(self, prefix: str, *, wait_replicas: int = 0) -> list[str]:
        """The ``ACL SETUSER`` rules of this role for the queue of ``prefix`` (after ``on >password``)."""
        commands = (*self.commands, "wait") if wait_replicas and self.name == "worker" else self.commands
        keys = f"{'~' if self.writes else '%R~'}{glob_escape(prefix)}*"
        channels = [f"&{glob_escape(prefix)}cancel"] if self.writes else []
        return ["resetkeys", "resetchannels", "-@all", *(f"+{c}" for c in dict.fromkeys(commands)), *channels, keys]


ROLES = {
    role.name: role
    for role in (
        Role(
            "worker",
            "run jobs and the chores beside them",
            (*CONNECTION, *READS, *SCRIPTS, *WORKER_WRITES, *LISTEN),
            writes=True,
        ),
        Role(
            "operator",
            "read, and replay, discard, run_now, cancel_delayed, cancel",
            (*CONNECTION, *READS, *SCRIPTS, *OPERATOR_MOVES),
            writes=True,
        ),
        Role("analyst", "read the queue's state, nothing else", (*CONNECTION, *READS), writes=False),
    )
}


def glob_escape(value: str) -> str:
    """``value`` matched literally in an ACL key pattern (a prefix may hold ``[`` or ``*``)."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", value)


_COMMAND = re.compile(r"permissions to run the '([^']+)' command")


def refused(exc: redis.exceptions.NoPermissionError, role: str, doing: str = "") -> str:
    """One line for a missing permission: the command refused (or "a key") and the role that has it."""
    found = _COMMAND.search(str(exc))
    what = f"the '{found.group(1)}' command" if found else "a key or command"
    during = f" ({doing})" if doing else ""
    return (
        f"Redis refused {what}{during}: {exc}; this user needs the {role} role "
        f"(`python -m worker acl {role}` prints its rules for ACL SETUSER)"
    )
