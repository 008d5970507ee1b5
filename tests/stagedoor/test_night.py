"""The demo night to its end, the data fix and the replay: the story the notebook tells."""

from __future__ import annotations

import re
import uuid

import psycopg
import redis

from stagedoor.demo import PLANTED_ISSUES, DemoNight
from worker.archive.rows import INSERT_ROW, dead_row
from worker.store.failures import now_iso
from worker.store.keys import Keys
from worker.store.scripts import Scripts
from worker.store.wire import DEAD_FIELDS

ACTION = (
    "INSERT INTO operator_actions (queue, id, at, by, action, kind, entries, reason, batch, detail) "
    "VALUES (%s, 'last-night', now(), 'ana', 'replay', 'render_tickets', 40, 'last night', '', '{}')"
)
ERROR = re.compile(r"SeatLabelInvalid: '(\d+-[A-D])' is not a row letter and a seat number")


def dead(r: redis.Redis, keys: Keys) -> list[tuple[str, dict[str, str]]]:
    return [(i.decode(), {k.decode(): v.decode() for k, v in f.items()}) for i, f in r.xrange(keys.dead)]


def test_the_night_ends_with_40_dead_renders_and_a_data_fix_and_replay_render_them(
    db: str, redis_url: str, r: redis.Redis, keys: Keys
) -> None:
    with DemoNight(db, redis_url, prefix=keys.prefix) as demo:
        night = demo.load()
        assert len(night.bad_orders) == 40 and "14-C" in night.bad_labels
        log = demo.run_to_end()
        assert "Burst mode: the queue is drained" in log

        entries = dead(r, keys)
        assert len(entries) == 40
        assert {f["kind"] for _, f in entries} == {"render_tickets"}
        assert {(f["attempts"], f["reason"]) for _, f in entries} == {("2", "exhausted")}
        labels = sorted(ERROR.fullmatch(f["error"]).group(1) for _, f in entries)  # type: ignore[union-attr]
        assert labels == sorted(night.bad_labels)
        assert {int(f["order_id"]) for _, f in entries} == set(night.bad_orders)
        assert all(f["outbox_id"] and f["request_id"] and f["trace"] for _, f in entries)
        assert "ticket_pdf.py" in entries[0][1]["traceback"]

        with psycopg.connect(db, autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM tickets WHERE rendered_at IS NOT NULL").fetchone() == (
                len(night.good_orders),
            )
            found = conn.execute("SELECT issue FROM reconciliation_issues ORDER BY issue").fetchall()
            assert tuple(issue for (issue,) in found) == PLANTED_ISSUES
            # the holds that had expired when the night was loaded are gone; later ones may remain
            assert conn.execute(
                "SELECT count(*) FROM holds WHERE expires_at < now() - interval '1 minute'"
            ).fetchone() == (0,)
        sent = demo.mail.messages()
        assert len(sent) == len({m["key"] for m in sent}) == 2 * len(night.paid_orders) + len(night.good_orders)
        assert demo.mail.answered[503] == demo.mail_failures

        with psycopg.connect(db, autocommit=True) as conn:
            fixed = conn.execute("UPDATE seats SET label = replace(label, '-', '') WHERE label LIKE '%-%'").rowcount
        assert fixed == 40
        scripts = Scripts(r, keys)
        batch = uuid.uuid4().hex[:8]
        assert all(scripts.replay(dead_id, batch, DEAD_FIELDS, at=now_iso(), record=True) for dead_id, _ in entries)
        demo.run_to_end()

        assert r.xlen(keys.dead) == 0
        with psycopg.connect(db, autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM tickets WHERE rendered_at IS NOT NULL").fetchone() == (
                len(night.paid_orders),
            )
        assert len(demo.mail.messages()) == 3 * len(night.paid_orders)


def test_a_fresh_night_empties_the_queues_archive_and_actions_and_keeps_other_queues(
    db: str, redis_url: str, keys: Keys
) -> None:
    """A second ``make run`` restarts order ids at 1: this queue's archive and actions from the night before
    would hold a second order 41 and another night's replays, so they go with Stagedoor's tables."""
    other = f"other:{uuid.uuid4().hex[:6]}:"
    with DemoNight(db, redis_url, prefix=keys.prefix) as demo:
        demo.load()
        with psycopg.connect(db, autocommit=True) as conn:
            for queue in (keys.prefix, other):
                conn.execute(
                    INSERT_ROW, dead_row(queue, 0, "1-0", [(b"kind", b"render_tickets"), (b"order_id", b"41")])
                )
                conn.execute(ACTION, (queue,))
        demo.load(reset=True)
        with psycopg.connect(db) as conn:
            for table in ("dead_letters", "operator_actions"):
                left = conn.execute(f"SELECT queue FROM {table} ORDER BY queue").fetchall()
                assert left == [(other,)], table
            assert conn.execute("SELECT min(id) FROM orders").fetchone() == (1,)  # order ids start again
