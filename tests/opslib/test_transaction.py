"""``opslib.transaction``: a data fix previewed on one connection, committed at the end or rolled back."""

from __future__ import annotations

import json
import re

import psycopg
import pytest
import redis

import opslib
from worker.store.keys import Keys


@pytest.fixture
def seats(pg_url: str) -> str:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE seats (id int PRIMARY KEY, label text)")
        conn.execute("INSERT INTO seats VALUES (1, '14-C'), (2, '7-A'), (3, '9B')")
    return pg_url


def labels(url: str) -> list[str]:
    return opslib.sql("SELECT label FROM seats ORDER BY id", conn=url)["label"].tolist()


FIX = "UPDATE seats SET label = replace(label, '-', '') WHERE label LIKE '%%-%%' RETURNING id, label"


def test_the_block_commits_what_it_previewed(seats: str) -> None:
    with opslib.transaction(conn=seats) as tx:
        preview = tx.sql(FIX)
        assert preview.sort_values("id")["label"].tolist() == ["14C", "7A"]
        assert labels(seats) == ["14-C", "7-A", "9B"]  # another connection does not see it yet
    assert tx.status == "committed"
    assert labels(seats) == ["14C", "7A", "9B"]


def test_rollback_and_an_exception_leave_the_data_as_it_was(seats: str) -> None:
    with opslib.transaction(conn=seats) as tx:
        assert len(tx.sql(FIX)) == 2
        tx.rollback()
        with pytest.raises(opslib.OpslibError, match="this transaction is rolled back; run further statements"):
            tx.sql("SELECT 1")
    assert tx.status == "rolled back"
    with pytest.raises(ZeroDivisionError), opslib.transaction(conn=seats) as tx:
        tx.sql(FIX)
        raise ZeroDivisionError
    assert tx.status == "rolled back"
    with pytest.raises(opslib.OpslibError, match="the query failed"), opslib.transaction(conn=seats) as tx:
        tx.sql(FIX)
        tx.sql("UPDATE seats SET nothing = 1")
    assert labels(seats) == ["14-C", "7-A", "9B"]


def test_bad_connections_are_one_clear_error(seats: str) -> None:
    with pytest.raises(opslib.OpslibError, match="takes a PostgreSQL URL, got int"):
        opslib.transaction(conn=5).__enter__()  # type: ignore[arg-type]
    hidden = re.escape("cannot reach PostgreSQL at postgresql://x:***@127.0.0.1:1/db")
    with pytest.raises(opslib.OpslibError, match=hidden):
        opslib.transaction(conn="postgresql://x:secret@127.0.0.1:1/db").__enter__()


def test_a_commit_is_one_sql_action_with_reason_by_and_row_counts(seats: str, r: redis.Redis, keys: Keys) -> None:
    at = {"client": r, "prefix": keys.prefix}
    with opslib.transaction(reason="seat map 14-C -> 14C, INC-2214", by="ana", conn=seats, **at) as tx:
        tx.sql(FIX)
        tx.sql("UPDATE seats SET label = label WHERE id = 3")  # no RETURNING: its row count all the same
    with opslib.transaction(reason="tried", conn=seats, **at) as tx:
        tx.sql(FIX)
        tx.rollback()  # nothing changed: nothing recorded
    done = opslib.actions(**at)
    assert done[["action", "by", "reason", "entries"]].values.tolist() == [
        ["sql", "ana", "seat map 14-C -> 14C, INC-2214", 3]
    ]
    statements = json.loads(done["detail"].iloc[0])["statements"]
    assert [s["rows"] for s in statements] == [2, 1] and statements[0]["sql"].startswith("UPDATE seats SET label")
    with opslib.transaction(conn=seats, **at) as tx:  # the reason may be left out; who is always known
        tx.sql("SELECT 1")
    assert opslib.actions(**at)["reason"].tolist() == ["seat map 14-C -> 14C, INC-2214", ""]
