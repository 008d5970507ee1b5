"""Edit and replay: a patch's fields on the replayed jobs, each entry's diff in the dry run, the patch kept in
the action's record, ``v`` re-running the upcasters, and the CLI's ``--set``."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import redis

import opslib
from opslib.cli import main
from opslib.panel.widgets import DeadLetterPanel
from tests.helpers import queue_state
from tests.opslib.helpers import bury
from worker.store.keys import Keys

MAIL_ERROR = {"attempts": "1", "error": "MailRejected: no such mailbox", "traceback": "tb", "reason": "exhausted"}


def replayed_fields(r: redis.Redis, keys: Keys) -> dict[str, dict[str, str]]:
    return {
        f[b"replay_of"].decode(): {k.decode(): v.decode() for k, v in f.items()}
        for _, f in r.xrange(keys.jobs)
        if f.get(b"replay_of")
    }


def test_a_patch_replay_shows_its_diff_sets_the_fields_and_keeps_the_patch_on_record(
    r: redis.Redis, keys: Keys, at: dict[str, Any]
) -> None:
    ids = [
        bury(r, keys, {"kind": "send_email", "job_id": f"j{n}", "email": f"old{n}@typo.example"}, MAIL_ERROR)
        for n in range(2)
    ]
    before = queue_state(r, keys.prefix)
    patch = {"email": "ada@example.org", "v": 1}
    plan = opslib.replay(ids, patch=patch, dry_run=True, **at)
    assert plan["changes"].tolist() == [
        "email: 'old0@typo.example' -> 'ada@example.org'; v: (none) -> '1'",
        "email: 'old1@typo.example' -> 'ada@example.org'; v: (none) -> '1'",
    ]
    assert plan["status"].tolist() == ["would replay"] * 2
    assert queue_state(r, keys.prefix) == before  # the dry run wrote nothing
    done = opslib.replay(ids, patch=patch, reason="typo in the address, INC-2291", **at)
    assert done["status"].tolist() == ["replayed"] * 2
    jobs = replayed_fields(r, keys)
    assert [jobs[i]["email"] for i in ids] == ["ada@example.org"] * 2
    assert [jobs[i]["v"] for i in ids] == ["1", "1"]
    assert all(list(jobs[i]).count("email") == 1 for i in ids)
    [record] = opslib.actions(**at).to_dict("records")
    assert record["action"] == "replay" and record["entries"] == 2
    assert json.loads(record["detail"]) == {"patch": {"email": "ada@example.org", "v": "1"}}


def test_replay_kind_takes_a_patch_and_a_reserved_field_is_refused_in_one_line(
    r: redis.Redis, keys: Keys, at: dict[str, Any]
) -> None:
    dead_id = bury(r, keys, {"kind": "send_email", "email": "x@y"}, MAIL_ERROR)
    before = queue_state(r, keys.prefix)
    with pytest.raises(opslib.OpslibError, match=r"^patch cannot set 'attempts': give payload fields \(or 'v'\)"):
        opslib.replay_kind("send_email", patch={"attempts": "0"}, **at)
    with pytest.raises(opslib.OpslibError, match=r"^patch field 'to' must be a string or a number, got list$"):
        opslib.replay([dead_id], patch={"to": ["a"]}, **at)
    assert queue_state(r, keys.prefix) == before
    done = opslib.replay_kind("send_email", error_contains="mailbox", patch={"to": "x@y"}, **at)
    assert done["dead_id"].tolist() == [dead_id]
    assert replayed_fields(r, keys)[dead_id]["to"] == "x@y"


def test_the_cli_replays_with_set_and_lists_each_change(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("QUEUE_PREFIX", keys.prefix)
    dead_id = bury(r, keys, {"kind": "send_email", "email": "old@typo.example"}, MAIL_ERROR)
    code = main(["replay", dead_id, "--set", "email=ada@example.org", "--yes"], stdin=io.StringIO())
    said = capsys.readouterr()
    assert code == 0, said.err
    change = "set email: 'old@typo.example' -> 'ada@example.org'"
    assert f"  {dead_id}  send_email  MailRejected: no such mailbox  {change}" in said.out
    assert replayed_fields(r, keys)[dead_id]["email"] == "ada@example.org"
    with pytest.raises(SystemExit) as exited:
        main(["replay", dead_id, "--set", "email"])
    assert exited.value.code == 2
    assert "--set: a patch is FIELD=VALUE (e.g. to=ada@example.org), got 'email'" in capsys.readouterr().err


def test_the_panel_replays_a_selection_with_a_patch(r: redis.Redis, keys: Keys, at: dict[str, Any]) -> None:
    ids = [bury(r, keys, {"kind": "send_email", "email": f"x{n}@typo<b>"}, MAIL_ERROR) for n in range(3)]
    panel = DeadLetterPanel(client=r, prefix=keys.prefix)
    panel.kind.value = "send_email"
    panel.entries.value = tuple(value for _label, value in panel.entries.options[:2])  # two of three, selected
    panel.patch.value = "email=ada@example.org; v=1"
    panel.replay_button.click()
    assert "Replay 2 selected dead letters</b>" in panel.question.value
    assert "setting <code>email, v</code>?" in panel.question.value
    panel.confirm.click()
    assert "Replayed <b>2</b> of 2" in panel.result.value
    jobs = replayed_fields(r, keys)
    assert len(jobs) == 2 and {job["email"] for job in jobs.values()} == {"ada@example.org"}
    assert set(jobs) < set(ids) and panel.patch.value == ""
    panel.patch.value = "attempts=0"
    panel.entries.value = (panel.entries.options[0][1],)
    panel.replay_button.click()
    assert "patch cannot set &#x27;attempts&#x27;" in panel.message.value  # one line, escaped, nothing moved
    assert len(replayed_fields(r, keys)) == 2


def test_a_patch_replay_of_a_bulk_dead_letter_goes_back_to_bulk(r: redis.Redis, keys: Keys, at: dict[str, Any]) -> None:
    bulk = Keys(keys.prefix, queue="bulk")
    r.sadd(keys.queues, "bulk")  # as a worker serving bulk records it
    dead_id = bury(r, bulk, {"kind": "send_email", "job_id": "b1", "email": "old@typo.example"}, MAIL_ERROR)
    plan = opslib.replay([dead_id], patch={"email": "ada@example.org"}, dry_run=True, **at)
    assert plan["changes"].tolist() == ["email: 'old@typo.example' -> 'ada@example.org'"]
    done = opslib.replay([dead_id], patch={"email": "ada@example.org"}, reason="typo, INC-2292", **at)
    assert done["status"].tolist() == ["replayed"]
    assert replayed_fields(r, bulk)[dead_id]["email"] == "ada@example.org"
    assert r.xlen(bulk.dead) == 0 and not r.exists(keys.jobs)  # nothing on default's stream
    [record] = opslib.actions(**at).to_dict("records")
    assert json.loads(record["detail"]) == {"patch": {"email": "ada@example.org"}}
