"""The three Redis roles of ``python -m worker acl``, as users on the test server: the worker's main paths
and an operator's moves run with no denial in ``ACL LOG``; an analyst reads everything and is refused a move
in one line naming the command and the role; so is a worker started under a role that lacks a permission."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
import pytest
import redis

import opslib
from benchmarks.fixtures import ensure_group
from tests.helpers import ROOT, Workers, wait_for
from tests.opslib.helpers import bury
from worker.embedded.servers import free_port
from worker.store.connection import connect
from worker.store.enqueue import enqueue
from worker.store.heartbeats import live_workers
from worker.store.keys import ARCHIVE_GROUP, Keys
from worker.store.roles import ROLES

KINDS = "tests.deploy.kinds_ticking"  # ok, flaky (a retry), boom (dead), a schedule every second


def acl_rules(role: str, prefix: str) -> list[str]:
    """What ``python -m worker acl ROLE`` prints for the queue of ``prefix``, split as a shell would."""
    env = {**os.environ, "QUEUE_PREFIX": prefix, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "worker", "acl", role], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    return shlex.split(out.stdout)


def with_user(url: str, name: str, password: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{quote(name)}:{quote(password)}@{parts.hostname}:{parts.port}"))


@pytest.fixture
def users(r: redis.Redis, redis_url: str, prefix: str) -> Iterator[dict[str, tuple[str, str]]]:
    """Role -> (user name, URL) of a user made from that role's printed rules; ACL LOG reset; deleted after."""
    tag = uuid.uuid4().hex[:8]
    made: dict[str, tuple[str, str]] = {}
    try:
        for role in ROLES:
            name, password = f"test-{role}-{tag}", uuid.uuid4().hex
            r.execute_command("ACL", "SETUSER", name, "on", f">{password}", *acl_rules(role, prefix))
            made[role] = (name, with_user(redis_url, name, password))
        r.execute_command("ACL", "LOG", "RESET")
        yield made
    finally:
        for name, _url in made.values():
            r.acl_deluser(name)


def denials(r: redis.Redis, user: str) -> list[dict[str, Any]]:
    """The ACL LOG entries of ``user`` (commands or keys refused)."""
    entries = r.execute_command("ACL", "LOG", "128")
    found = []
    for entry in entries:
        fields = entry if isinstance(entry, dict) else dict(zip(entry[::2], entry[1::2], strict=True))
        fields = {k.decode() if isinstance(k, bytes) else k: v for k, v in fields.items()}
        username = fields["username"].decode() if isinstance(fields["username"], bytes) else fields["username"]
        if username == user:
            found.append(fields)
    return found


def test_the_roles_are_scoped_to_the_prefix_and_the_analyst_reads_only(prefix: str) -> None:
    assert acl_rules("worker", prefix)[-1] == f"~{prefix}*"
    assert acl_rules("operator", prefix)[-1] == f"~{prefix}*"
    assert acl_rules("analyst", prefix)[-1] == f"%R~{prefix}*"
    assert acl_rules("worker", "odd[1]*:")[-1] == "~odd\\[1\\]\\*:*"
    analyst = set(acl_rules("analyst", prefix))
    assert not analyst & {"+evalsha", "+eval", "+xadd", "+del", "+set", "+zadd", "+keys", "+scan", "+flushall"}


def test_a_worker_under_the_worker_role_runs_its_main_paths_with_no_denial(
    r: redis.Redis, keys: Keys, prefix: str, users: dict[str, tuple[str, str]], workers: Workers, archive_url: str
) -> None:
    name, url = users["worker"]
    client = connect(url=url)  # as workers and opslib connect: no CLIENT SETINFO
    for kind in ("ok", "ok", "flaky", "boom", "boom"):
        enqueue(client, kind, {}, prefix=prefix)
    enqueue(client, "ok", {}, delay_s=0.5, prefix=prefix)
    enqueue(client, "ok", {}, unique_key="u", unique_for=60, prefix=prefix)  # released with PEXPIREAT
    enqueue(client, "ok", {}, job_id="mine", prefix=prefix)
    client.close()
    proc = workers.start(
        KINDS, REDIS_URL=url, WORKER_NAME="acl-worker", METRICS_PORT=str(free_port()), METRICS_INTERVAL_S="0.5"
    )

    def archived() -> int:
        with psycopg.connect(archive_url) as conn:
            row = conn.execute("SELECT count(*) FROM dead_letters WHERE queue = %s", (prefix,)).fetchone()
        return int(row[0]) if row else 0

    wait_for(
        lambda: (
            r.xlen(keys.dead) == 2
            and archived() == 2
            and r.zcard(keys.delayed) == 0
            and any(r.scan_iter(match=f"{prefix}sched:every_second:*", count=1000))
            and r.exists(keys.metrics_lock)
            and "acl-worker" in live_workers(r, keys)
            and r.pttl(keys.unique("ok", "u")) > 0
        ),
        timeout_s=60,
        what="the jobs run, retried, dead-lettered and archived, a tick, the metrics lock and a heartbeat",
    )
    assert r.xpending(keys.dead, ARCHIVE_GROUP)["pending"] == 0
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    log = workers.log(proc)
    assert "Traceback" not in log and "refused" not in log, log
    assert denials(r, name) == []


def test_an_operator_replays_and_discards_with_no_denial(
    r: redis.Redis, keys: Keys, prefix: str, users: dict[str, tuple[str, str]]
) -> None:
    name, url = users["operator"]
    first = bury(r, keys, {"kind": "ok", "job_id": "a"}, {"error": "ValueError: once"})
    second = bury(r, keys, {"kind": "ok", "job_id": "b"}, {"error": "ValueError: twice"})
    enqueue(r, "ok", {"job_id": "later"}, delay_s=3600, prefix=prefix)
    enqueue(r, "ok", {"job_id": "never"}, delay_s=3600, unique_key="n", unique_for=60, prefix=prefix)
    operator = connect(url=url)
    at = {"client": operator, "prefix": prefix}
    try:
        assert opslib.replay([first], **at)["status"].tolist() == ["replayed"]
        assert opslib.discard([second], reason="a test", **at)["status"].tolist() == ["discarded"]
        assert len(opslib.run_now(["later"], **at)) == 1
        assert len(opslib.cancel_delayed(["never"], reason="a test", **at)) == 1
        running = enqueue(r, "ok", {"job_id": "running"}, prefix=prefix)
        ensure_group(r, keys)
        r.xreadgroup("workers", "w1", {keys.jobs: ">"}, count=10)
        assert opslib.cancel(["running"], reason="a test", **at)["status"].tolist() == ["cancelled"]
        assert len(opslib.dead_letters(**at)) == 0
        opslib.pause("ok", reason="a test", **at)
        opslib.throttle("ok", 5, reason="a test", **at)
        opslib.throttle("ok", None, **at)
        opslib.resume("ok", **at)
        assert len(opslib.actions(**at)) == 9
    finally:
        operator.close()
    assert running and (r.xlen(keys.jobs), r.zcard(keys.delayed)) == (3, 0)
    assert r.pttl(keys.unique("ok", "n")) > 0  # cancelled: held until its unique_for ends
    assert denials(r, name) == []


def test_an_analyst_reads_everything_and_is_refused_a_move_in_one_line(
    r: redis.Redis, keys: Keys, prefix: str, users: dict[str, tuple[str, str]], workers: Workers
) -> None:
    dead_id = bury(r, keys, {"kind": "seat_label", "seat": "14-C"}, {"error": "SeatLabelInvalid: '14-C' is bad"})
    ensure_group(r, keys)
    enqueue(r, "seat_label", {"seat": "1A"}, prefix=prefix)
    r.xreadgroup("workers", "w1", {keys.jobs: ">"}, count=1)
    enqueue(r, "mailer", {"email": "a@b"}, delay_s=60, prefix=prefix)
    name, url = users["analyst"]
    analyst = connect(url=url)
    at = {"client": analyst, "prefix": prefix}
    try:
        with pytest.raises(redis.exceptions.NoPermissionError):
            analyst.xadd(keys.jobs, {"kind": "x"})  # the user really is read-only
        assert opslib.dead_letters(**at).index.tolist() == [dead_id]
        assert len(opslib.failure_groups(**at)) == 1
        assert len(opslib.pending(**at)) == 1
        assert len(opslib.pending_counts(**at)) == 1
        assert len(opslib.delayed(**at)) == 1
        assert opslib.queue_stats(**at).dead == 1
        assert opslib.replay_kind("seat_label", dry_run=True, **at)["status"].tolist() == ["would replay"]
        assert opslib.throughput(**at).empty  # no worker counted anything here
        assert opslib.find("1A", **at)["where"].tolist() == ["running"]
        assert opslib.find(dead_id, **at)["where"].tolist()[-1] == "dead"
        assert len(denials(r, name)) == 1  # only the XADD above
        assert opslib.cancel(["1A"], reason="a test", dry_run=True, **at)["status"].tolist() == ["not found"]
        with pytest.raises(opslib.OpslibError, match="this user needs the operator role"):
            opslib.cancel([r.xrange(keys.jobs)[0][0].decode()], reason="a test", **at)
        with pytest.raises(opslib.OpslibError) as refused:
            opslib.replay([dead_id], **at)
    finally:
        analyst.close()
    message = str(refused.value)
    assert "\n" not in message
    assert re.match(r"Redis refused the '(evalsha|script\|exists)' command \(replay dead letters\): ", message)
    assert "this user needs the operator role (`python -m worker acl operator`" in message
    assert r.xlen(keys.dead) == 1

    env = {**os.environ, "REDIS_URL": url, "QUEUE_PREFIX": prefix, "PYTHONPATH": str(ROOT)}
    cli = subprocess.run(
        [sys.executable, "-m", "opslib", "replay", dead_id, "--yes"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert cli.returncode != 0 and "Traceback" not in cli.stderr
    assert re.search(r"Redis refused the '[a-z|]+' command", cli.stderr) and "operator role" in cli.stderr

    # Enqueueing as the analyst: one line naming the command and the role (not "try again later").
    enqueued = subprocess.run(
        [sys.executable, "-m", "worker", "enqueue", "ok"],
        cwd=ROOT, env={**env, "WORKER_KINDS": KINDS}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert enqueued.returncode == 1 and "Traceback" not in enqueued.stderr
    assert enqueued.stderr.startswith("error: Redis refused the '") and "needs the worker role" in enqueued.stderr

    # A worker given the analyst's user: one line naming the command and the role, never a traceback.
    started = time.monotonic()
    proc = workers.start(KINDS, "--burst", REDIS_URL=url)
    assert proc.wait(60) == 1, workers.log(proc)
    log = workers.log(proc).strip()
    assert "Traceback" not in log
    assert log.splitlines()[-1].startswith("error: Redis refused the '"), log
    assert "this user needs the worker role" in log
    assert time.monotonic() - started < 60


def test_a_user_refused_at_connect_is_told_the_role_of_what_it_was_doing(
    r: redis.Redis, redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user that may not even run the connect-time probe: a read names the analyst role, a move the operator."""
    name, password = f"test-bare-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    r.execute_command("ACL", "SETUSER", name, "on", f">{password}", "+ping", "+hello", "+auth", "+client")
    try:
        monkeypatch.setenv("REDIS_URL", with_user(redis_url, name, password))
        monkeypatch.setenv("QUEUE_PREFIX", prefix)
        with pytest.raises(opslib.OpslibError, match="needs the analyst role") as read:
            opslib.dead_letters()
        with pytest.raises(opslib.OpslibError, match="needs the operator role") as move:
            opslib.replay(["1-0"])
    finally:
        r.acl_deluser(name)
    for refusal in (read, move):
        assert "\n" not in str(refusal.value) and password not in str(refusal.value)
