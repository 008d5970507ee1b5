"""Bad input at the edges: opslib (its functions and ``python -m opslib``) and
``python -m worker enqueue`` given unknown kinds, malformed ids and unreachable
servers answer with a clear message and change nothing in the queue.

The command lines are checked for what only they add (exit code, a short
message without a traceback); each ``python -m opslib`` start costs seconds
here, so its checks of ids and kinds are made through the functions it calls.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import redis

import opslib
from tests.faults.helpers import KINDS
from tests.helpers import ROOT, Workers, queue_state
from worker.embedded.servers import free_port
from worker.store.enqueue import enqueue
from worker.store.keys import Keys


@pytest.fixture
def filled(r: redis.Redis, keys: Keys, prefix: str) -> dict[bytes, Any]:
    """A queue with two jobs, one delayed job and three dead entries; its state."""
    enqueue(r, "record", {"order_id": "1"}, prefix=prefix)
    enqueue(r, "record", {"order_id": "2"}, prefix=prefix)
    enqueue(r, "record", {"order_id": "3"}, delay_s=3600, prefix=prefix)
    for i in range(3):
        r.xadd(keys.dead, {"kind": "fail", "job_id": f"d{i}", "attempts": "1", "error": "ValueError: on purpose",
                           "reason": "exhausted", "failed_at": "2026-11-30T21:14:00.000Z", "worker": "w"})  # fmt: skip
    return queue_state(r, prefix)


def unreachable() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"


def unreachable_pg() -> str:
    return f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c, p: opslib.replay("not-an-id", client=c, prefix=p), "is not a stream entry id"),
        (lambda c, p: opslib.replay(["1-0", "1-x"], client=c, prefix=p), "'1-x' is not a stream entry id"),
        (lambda c, p: opslib.replay_kind("no_such_kind", client=c, prefix=p), "unknown kind 'no_such_kind'"),
        (lambda c, p: opslib.dead_letters("no_such_kind", client=c, prefix=p), "unknown kind 'no_such_kind'"),
        (lambda c, p: opslib.replay_status("no such batch!", client=c, prefix=p), "batch"),
        (lambda c, p: opslib.replay("1-0", client=redis.Redis.from_url(unreachable()), prefix=p), "127.0.0.1"),
        (lambda c, p: opslib.dead_letters(client=redis.Redis.from_url(unreachable()), prefix=p), "127.0.0.1"),
        (lambda c, p: opslib.discard("1-0", reason="", client=c, prefix=p), "discard needs a reason"),
        (lambda c, p: opslib.discard_kind("fail", reason=None, client=c, prefix=p), "discard needs a reason"),
        (lambda c, p: opslib.discard(["1-0", "1-x"], reason="r", client=c, prefix=p), "'1-x' is not a stream entry"),
        (lambda c, p: opslib.discard_kind("no_such_kind", reason="r", client=c, prefix=p), "unknown kind"),
        (
            lambda c, p: opslib.discard("1-0", reason="r", client=c, prefix=p, conn=unreachable_pg()),
            "does not answer",
        ),
        (lambda c, p: opslib.replay("1-0", client=c, prefix=p, conn=unreachable_pg()), "does not answer"),
    ],
    ids=[
        "replay-bad-id",
        "replay-one-bad-id",
        "replay-kind-unknown",
        "dead-unknown-kind",
        "status-bad-batch",
        "replay-unreachable",
        "dead-unreachable",
        "discard-no-reason",
        "discard-kind-no-reason",
        "discard-one-bad-id",
        "discard-kind-unknown",
        "discard-archive-unreachable",
        "replay-archive-unreachable",
    ],
)
def test_opslib_refuses_bad_input_clearly_and_changes_nothing(
    call: Any, message: str, r: redis.Redis, prefix: str, filled: dict[bytes, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKER_KINDS", KINDS)
    with pytest.raises(opslib.OpslibError, match=message.replace("(", r"\(")) as caught:
        call(r, prefix)
    assert len(str(caught.value)) < 1000 and "\n" not in str(caught.value)
    assert queue_state(r, prefix) == filled


def test_a_discard_of_unknown_ids_lists_them_as_missing_and_changes_nothing(
    r: redis.Redis, prefix: str, filled: dict[bytes, Any]
) -> None:
    done = opslib.discard(["1-0", "2-0"], reason="refunded", client=r, prefix=prefix)
    assert done["status"].tolist() == ["missing", "missing"]
    assert queue_state(r, prefix) == filled


@pytest.mark.parametrize(
    ("argv", "env", "code", "message"),
    [
        (["-m", "opslib", "stats"], {"REDIS_URL": "unreachable"}, 1, "127.0.0.1"),
        (["-m", "worker", "enqueue", "no_such_kind", "order_id=1"], {}, 2, "unknown kind 'no_such_kind'"),
        (["-m", "worker", "enqueue", "record", "order_id"], {}, 2, "'order_id' is not key=value"),
        (["-m", "worker", "enqueue", "record", "order_id=1"], {"REDIS_URL": "unreachable"}, 1, "Redis does not answer"),
        (["-m", "opslib", "discard", "1-0"], {}, 2, "discard needs --reason TEXT"),
        (["-m", "opslib", "discard", "1-0", "--reason", "r", "--yes"], {"ARCHIVE_URL": "pg"}, 1, "does not answer"),
    ],
    ids=[
        "opslib-unreachable",
        "worker-enqueue-unknown-kind",
        "worker-enqueue-bad-field",
        "worker-enqueue-unreachable",
        "opslib-discard-no-reason",
        "opslib-discard-archive-unreachable",
    ],
)
def test_the_command_lines_refuse_bad_input_clearly_and_change_nothing(
    argv: list[str],
    env: dict[str, str],
    code: int,
    message: str,
    r: redis.Redis,
    prefix: str,
    workers: Workers,
    filled: dict[bytes, Any],
) -> None:
    extra = {
        name: {"unreachable": unreachable(), "pg": unreachable_pg()}.get(value, value) for name, value in env.items()
    }
    done = subprocess.run(
        [sys.executable, *argv],
        cwd=ROOT,
        env=workers.env(KINDS, **extra),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == code, done.stdout + done.stderr
    assert message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) <= (1 if "opslib" in argv else 3), done.stderr
    assert queue_state(r, prefix) == filled
