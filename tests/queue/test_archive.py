"""The dead-letter archive: real worker processes, the run's Valkey and PostgreSQL.

Every dead entry reaches ``dead_letters`` once; ``jobs:dead`` is trimmed only
of archived entries; the log records of replays and outcomes are applied to
the rows; ``python -m worker migrate`` applies the table.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import psycopg
import pytest
import redis

import opslib
from tests.faults.helpers import KINDS, enqueue_many
from tests.helpers import ROOT, Workers, wait_for
from worker.archive.table import fields_from_json, migrate_url
from worker.embedded.servers import free_port
from worker.store.keys import ARCHIVE_GROUP, Keys
from worker.store.scripts import Scripts


def rows(archive_url: str, prefix: str, *columns: str) -> list[tuple[Any, ...]]:
    """The archive's rows of this test's queue, in dead id order."""
    names = ", ".join(columns or ("dead_id",))
    migrate_url(archive_url)
    with psycopg.connect(archive_url) as conn:
        return conn.execute(
            f"SELECT {names} FROM dead_letters WHERE queue = %s ORDER BY dead_at, dead_id", (prefix,)
        ).fetchall()


def test_every_dead_entry_is_archived_once_with_its_columns_and_wire_fields(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers, archive_url: str
) -> None:
    enqueue_many(r, keys, "fail", 30, request_id="req-1")
    r.xadd(keys.jobs, {b"kind": b"\xff\xfe", b"job_id": b"bin"})  # malformed: not UTF-8
    workers.burst(KINDS)
    dead = r.xrange(keys.dead)
    assert len(dead) == 31
    archived = rows(
        archive_url, prefix, "dead_id", "kind", "job_id", "attempts", "reason", "error_type", "error", "signature",
        "request_id", "status", "fields",
    )  # fmt: skip
    assert [row[0] for row in archived] == [entry_id.decode() for entry_id, _ in dead]
    first = next(row for row in archived if row[2] == "j0")
    assert first[1:10] == (
        "fail", "j0", 1, "exhausted", "ValueError", "ValueError: fails on purpose", "ValueError: fails on purpose",
        "req-1", "dead",
    )  # fmt: skip
    for (_entry_id, fields), row in zip(dead, archived, strict=True):
        assert fields_from_json(row[10]) == list(fields.items())  # byte for byte, in order
    assert archived[-1][4] == "malformed"
    assert r.xpending(keys.dead, ARCHIVE_GROUP)["pending"] == 0


def test_the_dead_stream_is_trimmed_to_its_cap_only_of_archived_entries(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers, archive_url: str
) -> None:
    enqueue_many(r, keys, "fail", 60)
    workers.burst(KINDS, DEAD_MAXLEN="20")
    assert len(rows(archive_url, prefix)) == 60
    proc = workers.start(KINDS, DEAD_MAXLEN="20")  # the trim chore runs every second
    wait_for(lambda: r.xlen(keys.dead) == 20, timeout_s=30, what="jobs:dead trimmed to DEAD_MAXLEN")
    assert int(r.get(keys.dead_evicted) or 0) == 0
    assert [e.decode() for e, _ in r.xrange(keys.dead)] == [row[0] for row in rows(archive_url, prefix)][-20:]
    proc.terminate()
    proc.wait(30)


def test_trim_keeps_every_entry_the_archive_group_has_not_acknowledged(r: redis.Redis, keys: Keys) -> None:
    scripts = Scripts(r, keys)
    ids = [r.xadd(keys.dead, {"kind": "k", "n": str(i)}).decode() for i in range(30)]
    assert scripts.trim_dead(10, 1000) == [0, 0]  # no archive group yet: nothing is known to be archived
    r.xgroup_create(keys.dead, ARCHIVE_GROUP, id="0")
    r.xreadgroup(ARCHIVE_GROUP, "a", {keys.dead: ">"}, count=15)
    r.xack(keys.dead, ARCHIVE_GROUP, *ids[:5], *ids[6:15])  # ids[5] stays pending
    assert scripts.trim_dead(10, 1000) == [5, 0]
    assert r.xrange(keys.dead, count=1)[0][0].decode() == ids[5]
    r.xack(keys.dead, ARCHIVE_GROUP, ids[5])
    assert scripts.trim_dead(10, 3) == [3, 0]  # at most `step` a call
    assert scripts.trim_dead(10, 1000) == [7, 0]  # the 15 acknowledged ones, down to 15 left
    assert r.xlen(keys.dead) == 15  # the 15 undelivered stay although the cap is 10
    r.set(keys.dead_evicted, 4)
    assert scripts.trim_dead(10, 1000) == [0, 4]


def test_replay_marks_rows_and_the_worker_records_each_final_outcome(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers, archive_url: str
) -> None:
    r.xadd(keys.jobs, {"kind": "fail", "job_id": "again"})
    workers.burst(KINDS)
    failed_id = r.xrange(keys.dead)[0][0].decode()
    r.xadd(keys.dead, {"kind": "record", "job_id": "ok-after", "error": "E: was broken", "reason": "exhausted"})
    ok_id = r.xrange(keys.dead)[-1][0].decode()
    workers.burst(KINDS)
    done = opslib.replay([failed_id, ok_id], client=r, prefix=prefix)
    assert done["status"].tolist() == ["replayed", "replayed"]
    workers.burst(KINDS)
    archived = {
        row[0]: row[1:]
        for row in rows(archive_url, prefix, "dead_id", "status", "replay_batch", "replay_new_id", "replay_outcome",
                        "replay_dead_id")
    }  # fmt: skip
    batch = done.attrs["batch"]
    new_dead = [e.decode() for e, f in r.xrange(keys.dead) if f.get(b"replay_of") == failed_id.encode()]
    assert archived[failed_id] == ("replayed", batch, done["new_id"][0], "failed again", new_dead[0])
    assert archived[ok_id] == ("replayed", batch, done["new_id"][1], "succeeded", None)
    assert archived[new_dead[0]][0] == "dead"
    assert r.xlen(keys.dead_log) == 0


def test_archive_off_keeps_the_old_cap_that_evicts_and_counts(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers, archive_url: str
) -> None:
    enqueue_many(r, keys, "fail", 400)
    workers.burst(KINDS, ARCHIVE_URL="off", DEAD_MAXLEN="100")
    length, evicted = r.xlen(keys.dead), int(r.get(keys.dead_evicted) or 0)
    assert length < 400 and length + evicted == 400
    assert not r.exists(keys.dead_log)
    assert ARCHIVE_GROUP not in {g["name"].decode() for g in r.xinfo_groups(keys.dead)}
    assert rows(archive_url, prefix) == []


@pytest.mark.parametrize("archive", ["", "off"])
def test_python_m_worker_migrate_applies_the_archive_table(archive: str, pg_url: str, tmp_path: Any) -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "WORKER_DATA_DIR": str(tmp_path)}
    env.update({"ARCHIVE_URL": "off"} if archive else {"DATABASE_URL": pg_url})
    done = subprocess.run(
        [sys.executable, "-m", "worker", "migrate"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    with psycopg.connect(pg_url) as conn:
        exists = conn.execute("SELECT to_regclass('dead_letters') IS NOT NULL").fetchone()
    assert exists == ((not archive),)
    assert done.stdout.strip() == (
        "nothing to migrate: the archive is off (ARCHIVE_URL=off)" if archive else "migrated"
    )


def test_past_the_hard_ceiling_the_dead_stream_evicts_counts_and_logs_it(
    r: redis.Redis, keys: Keys, prefix: str, workers: Workers
) -> None:
    away = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"  # the archive does not answer
    proc = workers.start(KINDS, ARCHIVE_URL=away, DEAD_MAXLEN="10", DEAD_HARD_MAXLEN="100", SCHEDULER="off")
    enqueue_many(r, keys, "fail", 400)
    wait_for(
        lambda: r.xlen(keys.dead) + int(r.get(keys.dead_evicted) or 0) == 400,
        what="400 jobs dead-lettered or evicted",
    )
    length, evicted = r.xlen(keys.dead), int(r.get(keys.dead_evicted) or 0)
    assert 100 <= length < 400 and evicted > 0  # MAXLEN ~: whole nodes go, the ceiling is approximate
    wait_for(
        lambda: f"dead entries were evicted from {prefix}jobs:dead by DEAD_HARD_MAXLEN=100" in workers.log(proc),
        what="the eviction to be logged",
    )
    assert "Chore archive lost its connection" in workers.log(proc)
    assert proc.poll() is None


def test_the_table_the_insert_and_the_row_follow_one_declaration_of_the_columns() -> None:
    from worker.archive.rows import INSERT_ROW, ROW_COLUMNS, dead_row
    from worker.archive.table import COLUMN_NAMES, COLUMNS, DDL, PRIMARY_KEY

    for column in COLUMNS:
        assert f"    {column.name} " in DDL
        if column.name not in PRIMARY_KEY:  # a column declared later reaches an existing table
            assert f"ADD COLUMN IF NOT EXISTS {column.name} {column.sql};" in DDL
    assert tuple(c.name for c in COLUMNS if c.writer == "entry") == ROW_COLUMNS
    assert f"({', '.join(ROW_COLUMNS)})" in INSERT_ROW
    row = dead_row("q:", 2, "1700000000000-1", [(b"kind", b"k"), (b"job_id", b"j"), (b"error", b"E: x")])
    named = dict(zip(ROW_COLUMNS, row, strict=True))
    assert (named["queue"], named["partition"], named["kind"], named["job_id"], named["error_type"]) == (
        "q:", 2, "k", "j", "E",
    )  # fmt: skip
    assert set(COLUMN_NAMES) >= set(ROW_COLUMNS)
