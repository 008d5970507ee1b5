"""Reading the dead-letter archive: archive(), history(), plot_history() and the join through sql().

The converters are tested without a database; the queries against a real
PostgreSQL, in a schema of the test's own with rows written straight into
``dead_letters``.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from collections.abc import Iterator
from typing import Any

import pandas as pd
import psycopg
import pytest
import redis

import opslib
from opslib.archive_frames import (
    ARCHIVE_COLUMNS,
    ARCHIVE_SELECT,
    HISTORY_COLUMNS,
    NOT_SHOWN,
    archive_to_frame,
    freq_label,
    history_to_frame,
    parse_freq,
)
from opslib.frames import DEAD_COLUMNS
from stagedoor.schema import migrate_url as migrate_stagedoor
from tests.opslib.helpers_archive import at, dead_row, insert_rows
from worker.archive.table import COLUMNS, migrate
from worker.store.keys import Keys

HOUR = pd.Timedelta("1h")


def dtypes(frame: pd.DataFrame) -> dict[str, str]:
    return {name: str(dtype) for name, dtype in frame.dtypes.items()}


# --- the converters, without a database ---------------------------------------------------------


def test_an_empty_archive_frame_has_every_column_and_dtype() -> None:
    frame = archive_to_frame([])
    assert dtypes(frame) == ARCHIVE_COLUMNS
    assert frame.index.name == "dead_id" and str(frame.index.dtype) == "str"
    assert list(frame.columns[: len(DEAD_COLUMNS)]) == [
        name.replace("replay_batch", "replay_of_batch") for name in DEAD_COLUMNS
    ]


def test_an_archive_frame_decodes_the_wire_fields_and_the_life_after_death() -> None:
    values = {name: None for name in ARCHIVE_SELECT}
    values |= {
        "dead_id": "1796000000000-3",
        "dead_at": pd.Timestamp("2026-11-30 22:14:00+01:00").to_pydatetime(),
        "fields": [
            ["kind", "render_tickets"],
            ["outbox_id", "88210"],
            ["order_id", "4471"],
            ["replay_of", "1795000000000-0"],
            ["replay_batch", "20261130T211400Z-3f9a1c2e"],
            ["status", "mine"],
            [{"b64": "/w=="}, {"b64": "AP8="}],
        ],
        "kind": "render_tickets",
        "error": "SeatLabelInvalid: '14-C' is not a row letter and a seat number",
        "partition": 0,
        "status": "replayed",
        "replayed_at": pd.Timestamp("2026-12-01 08:00", tz="UTC").to_pydatetime(),
        "replay_batch": "20261201T080000Z-00000001",
        "replay_new_id": "1796100000000-0",
        "replay_outcome": "succeeded",
        "archived_at": pd.Timestamp("2026-11-30 21:14:01", tz="UTC").to_pydatetime(),
    }
    frame = archive_to_frame([tuple(values[name] for name in ARCHIVE_SELECT)])
    assert dtypes(frame) == ARCHIVE_COLUMNS | {"\\xff": "str", "field:status": "str", "order_id": "str"}
    row = frame.loc["1796000000000-3"]
    assert row["dead_at"] == pd.Timestamp("2026-11-30 21:14", tz="UTC")
    assert (row["job_id"], row["outbox_id"], row["attempts"], row["request_id"]) == ("", "88210", 0, "")
    assert (row["replay_of"], row["replay_of_batch"]) == ("1795000000000-0", "20261130T211400Z-3f9a1c2e")
    assert (row["status"], row["replay_batch"], row["replay_outcome"]) == (
        "replayed",
        "20261201T080000Z-00000001",
        "succeeded",
    )
    assert row["discarded_at"] is pd.NaT and row["discard_reason"] == ""
    assert (row["order_id"], row["field:status"], row["\\xff"]) == ("4471", "mine", "\x00\\xff")


def test_history_frames_fill_the_quiet_periods_with_zeros() -> None:
    assert dtypes(history_to_frame([], HOUR)) == HISTORY_COLUMNS
    rows = [(at(20), "render_tickets", 3, 0, 0, 0), (at(23), "send_email", 0, 2, 0, 1)]
    frame = history_to_frame(rows, HOUR)
    assert dtypes(frame) == HISTORY_COLUMNS and frame.attrs["freq"] == HOUR
    assert len(frame) == 4 * 2 and frame["died"].sum() == 3 and frame["succeeded_after_replay"].sum() == 1
    assert frame.iloc[0].tolist() == [at(20), "render_tickets", 3, 0, 0, 0]
    assert frame.iloc[-1].tolist() == [at(23), "send_email", 0, 2, 0, 1]
    window = history_to_frame([], HOUR, start=at(18), end=at(20), kinds=["send_email"])
    assert window[["period", "kind", "died"]].values.tolist() == [[at(18), "send_email", 0], [at(19), "send_email", 0]]
    with pytest.raises(opslib.OpslibError, match="too long to show; choose a longer freq"):
        history_to_frame([], pd.Timedelta("1s"), start=at(0, day=1), end=at(0, day=30), kinds=["a", "b"])


@pytest.mark.parametrize(
    ("freq", "label"), [("1h", "1h"), ("15min", "15min"), ("24h", "1D"), ("7D", "7D"), (pd.Timedelta("90s"), "90s")]
)
def test_a_freq_is_a_fixed_length_of_whole_seconds(freq: object, label: str) -> None:
    assert parse_freq(freq) == pd.Timedelta(freq)
    assert freq_label(parse_freq(freq)) == label


@pytest.mark.parametrize("freq", ["1M", "1Y", "hourly", "0h", "-1h", "500ms", 3600, None])
def test_a_bad_freq_names_good_ones(freq: object) -> None:
    with pytest.raises(opslib.OpslibError, match=r"is not a period length; .* '15min', '1h', '6h', '1D'"):
        parse_freq(freq)


# --- against PostgreSQL -------------------------------------------------------------------------


@pytest.fixture
def night_archive(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test's schema with the archive's table, and the night's rows in it; the environment cleared."""
    for name in ("ARCHIVE_URL", "DATABASE_URL", "QUEUE_PREFIX"):
        monkeypatch.delenv(name, raising=False)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        migrate(conn)
        insert_rows(conn, NIGHT)
    return pg_url


@pytest.fixture
def conn(night_archive: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(night_archive, autocommit=True) as connection:
        yield connection


REPLAY = {"replay_batch": "20261130T231500Z-0000000b", "status": "replayed", "replayed_at": at(23, 15)}
NIGHT = [
    dead_row(at(20, 10), "render_tickets", payload={"order_id": "4471"}, **REPLAY, replay_outcome="succeeded"),
    dead_row(at(20, 20), "render_tickets", payload={"order_id": "4472"}, **REPLAY, replay_outcome="failed again"),
    dead_row(at(20, 30), "send_email", error="MailTimeout: no answer in 10 s"),
    dead_row(
        at(20, 50),
        "render_tickets",
        payload={"order_id": "4473"},
        status="discarded",
        discarded_at=at(21, 30),
        discarded_by="ana",
        discard_reason="order refunded",
    ),
    dead_row(at(22, 5), "render_tickets", payload={"order_id": "4474"}),
    dead_row(at(23, 20), "render_tickets", payload={"order_id": "4472", "replay_of": "x", "replay_batch": "b"}),
    dead_row(at(21), "render_tickets", queue="other:", payload={"order_id": "1"}),
]


def test_archive_reads_every_row_of_the_queue_oldest_first(conn: psycopg.Connection[Any]) -> None:
    frame = opslib.archive(conn=conn, prefix="")
    assert dtypes(frame) == ARCHIVE_COLUMNS | {"order_id": "str"}
    assert frame["dead_at"].tolist() == [at(20, 10), at(20, 20), at(20, 30), at(20, 50), at(22, 5), at(23, 20)]
    assert frame["status"].tolist() == ["replayed", "replayed", "dead", "discarded", "dead", "dead"]
    assert frame["replay_outcome"].tolist() == ["succeeded", "failed again", "", "", "", ""]
    assert frame["order_id"].fillna("-").tolist() == ["4471", "4472", "-", "4473", "4474", "4472"]
    assert frame.iloc[-1][["replay_of", "replay_of_batch", "replay_batch"]].tolist() == ["x", "b", ""]
    discarded = frame[frame["status"] == "discarded"].iloc[0]
    assert (discarded["discarded_at"], discarded["discarded_by"], discarded["discard_reason"]) == (
        at(21, 30),
        "ana",
        "order refunded",
    )
    other = opslib.archive(conn=conn, prefix="other:")
    assert other["kind"].tolist() == ["render_tickets"]


def test_archive_filters(conn: psycopg.Connection[Any]) -> None:
    def ids(**filters: Any) -> list[pd.Timestamp]:
        return opslib.archive(conn=conn, prefix="", **filters)["dead_at"].tolist()

    assert ids(kind="send_email") == [at(20, 30)]
    assert ids(kind="render_tickets", status="replayed") == [at(20, 10), at(20, 20)]
    assert ids(status="discarded") == [at(20, 50)]
    assert ids(since=at(20, 30), until=at(22, 5)) == [at(20, 30), at(20, 50)]
    assert ids(since="2026-11-30 22:00") == [at(22, 5), at(23, 20)]
    assert ids(signature=opslib.signature("MailTimeout: no answer in 10 s")) == [at(20, 30)]
    assert ids(kind="render_tickets", limit=2) == [at(22, 5), at(23, 20)]
    assert ids(since=at(23, 30)) == []
    empty = opslib.archive("send_email", since=at(23), conn=conn, prefix="")
    assert empty.empty and dtypes(empty) == ARCHIVE_COLUMNS


def test_archive_and_history_refuse_bad_arguments_with_one_clear_error(conn: psycopg.Connection[Any]) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        (
            {"kind": "render_ticket"},
            r"unknown kind 'render_ticket'; did you mean 'render_tickets'\? "
            r"Kinds the archive holds or the live workers declare: render_tickets, send_email",
        ),
        ({"kind": ""}, "kind must be a non-empty string"),
        ({"status": "replay"}, "status must be one of 'dead', 'replayed', 'discarded' or None"),
        ({"limit": 0}, "limit must be a whole number >= 1"),
        ({"since": "yesterday-ish"}, "since='yesterday-ish' is not a time"),
        ({"until": "soon"}, "until='soon' is not a time"),
        ({"since": at(22), "until": at(21)}, r"until \(2026-11-30 21:00:00 UTC\) must be after since"),
        ({"signature": "MailTimeout: no answer in 10 s"}, "is not a signature"),
    ]
    for arguments, message in cases:
        with pytest.raises(opslib.OpslibError, match=message):
            opslib.archive(conn=conn, prefix="", **arguments)
    with pytest.raises(opslib.OpslibError, match="unknown kind 'render_ticket'; did you mean"):
        opslib.history(kind="render_ticket", conn=conn, prefix="")
    with pytest.raises(opslib.OpslibError, match="freq='1M' is not a period length"):
        opslib.history(freq="1M", conn=conn, prefix="")
    with pytest.raises(opslib.OpslibError, match="until='later' is not a time"):
        opslib.history(until="later", conn=conn, prefix="")
    assert opslib.archive(conn=conn, prefix="", kind="send_email").shape[0] == 1  # the connection is still usable


def test_the_archive_is_found_from_the_environment(
    night_archive: str, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", night_archive)
    assert len(opslib.archive()) == 6  # ARCHIVE_URL empty: the archive lives in DATABASE_URL
    monkeypatch.setenv("QUEUE_PREFIX", "other:")
    assert len(opslib.history(freq="1D")) == 1
    monkeypatch.setenv("DATABASE_URL", "postgresql://postgres@127.0.0.1:1/nowhere")
    monkeypatch.setenv("ARCHIVE_URL", night_archive)
    assert len(opslib.archive()) == 1
    monkeypatch.setenv("ARCHIVE_URL", "off")
    with pytest.raises(opslib.OpslibError, match=r"the dead-letter archive is off \(ARCHIVE_URL=off\)"):
        opslib.history()
    monkeypatch.setenv("ARCHIVE_URL", "postgresql://postgres@127.0.0.1:1/nowhere")
    with pytest.raises(
        opslib.OpslibError, match=r"(?s)cannot reach PostgreSQL at .*; start the stack .* or set ARCHIVE_URL"
    ):
        opslib.archive()


def test_a_database_without_the_archive_says_how_to_create_it(pg_url: str) -> None:
    with pytest.raises(
        opslib.OpslibError, match="the archive's table dead_letters is not in this database; the workers"
    ):
        opslib.archive(conn=pg_url, prefix="")


def test_history_counts_each_event_in_its_own_period(conn: psycopg.Connection[Any]) -> None:
    frame = opslib.history(conn=conn, prefix="")
    assert dtypes(frame) == HISTORY_COLUMNS and frame.attrs["freq"] == HOUR
    assert frame.set_index(["period", "kind"]).to_dict("index") == {
        (at(20), "render_tickets"): {"died": 3, "replayed": 0, "discarded": 0, "succeeded_after_replay": 0},
        (at(20), "send_email"): {"died": 1, "replayed": 0, "discarded": 0, "succeeded_after_replay": 0},
        (at(21), "render_tickets"): {"died": 0, "replayed": 0, "discarded": 1, "succeeded_after_replay": 0},
        (at(21), "send_email"): {"died": 0, "replayed": 0, "discarded": 0, "succeeded_after_replay": 0},
        (at(22), "render_tickets"): {"died": 1, "replayed": 0, "discarded": 0, "succeeded_after_replay": 0},
        (at(22), "send_email"): {"died": 0, "replayed": 0, "discarded": 0, "succeeded_after_replay": 0},
        (at(23), "render_tickets"): {"died": 1, "replayed": 2, "discarded": 0, "succeeded_after_replay": 1},
        (at(23), "send_email"): {"died": 0, "replayed": 0, "discarded": 0, "succeeded_after_replay": 0},
    }
    daily = opslib.history(freq="1D", kind="render_tickets", conn=conn, prefix="")
    assert daily.values.tolist() == [[at(0), "render_tickets", 5, 2, 1, 1]]


def test_history_windows_are_whole_periods(conn: psycopg.Connection[Any]) -> None:
    frame = opslib.history(since=at(21, 40), until=at(22, 30), conn=conn, prefix="")
    assert frame[["period", "kind", "died", "discarded"]].values.tolist() == [
        [at(21), "render_tickets", 0, 1],
        [at(22), "render_tickets", 1, 0],
    ]  # the kinds with an event in the window
    quiet = opslib.history(kind="send_email", since=at(22), until=at(23, 59), conn=conn, prefix="")
    assert quiet[["period", "died"]].values.tolist() == [[at(22), 0], [at(23), 0]]
    replays = opslib.history(freq="30min", since=at(23), until=at(23, 30), conn=conn, prefix="")
    assert replays.loc[replays["kind"] == "render_tickets", ["replayed", "died"]].values.tolist() == [[2, 1]]


def heights(ax: Any, measure: int) -> list[float]:
    """The heights of one count's bars, one per period."""
    return [bar.get_height() for bar in ax.containers[measure]]


def test_plot_history_draws_the_four_counts_in_one_call(conn: psycopg.Connection[Any]) -> None:
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    frame = opslib.history(conn=conn, prefix="")
    ax = opslib.plot_history(frame)
    assert [bars.get_label() for bars in ax.containers] == ["died", "replayed", "discarded", "succeeded after replay"]
    assert ax.get_title(loc="left") == "dead letters per hour"
    assert heights(ax, 0) == [4, 0, 1, 1] and heights(ax, 1) == [0, 0, 0, 2] and heights(ax, 3) == [0, 0, 0, 1]
    one = frame.pipe(opslib.plot_history, kind="send_email")
    assert heights(one, 0) == [1, 0, 0, 0]
    assert one.get_title(loc="left") == "dead letters of send_email per hour"
    read = opslib.plot_history(freq="1D", conn=conn, prefix="")
    assert heights(read, 2) == [1] and read.get_title(loc="left") == "dead letters per day"
    empty = opslib.plot_history(since=at(9, day=1), until=at(10, day=1), conn=conn, prefix="")
    assert empty.texts[0].get_text() == "nothing happened in this window"
    assert ax.get_xlabel() == "window 30 Nov 20:00 – 01 Dec 00:00 UTC"  # the periods of the frame
    ax.figure.canvas.draw()
    ticks = [label.get_text() for label in ax.get_xticklabels()]
    assert ticks[0] == "20:00" and "21:00" in ticks
    opslib.set_display_tz("Europe/Prague")  # the same bars, the axis an hour later (CET)
    try:
        prague = opslib.plot_history(frame)
        prague.figure.canvas.draw()
        assert prague.get_xlabel() == "window 30 Nov 21:00 – 01 Dec 01:00 Europe/Prague"
        ticks = [label.get_text() for label in prague.get_xticklabels()]
        assert ticks[0] == "21:00" and "22:00" in ticks
        assert heights(prague, 0) == heights(ax, 0)
    finally:
        opslib.set_display_tz(None)
    with pytest.raises(opslib.OpslibError, match="got a frame and history\\(\\)'s arguments \\['freq'\\]"):
        opslib.plot_history(frame, freq="1D")
    with pytest.raises(opslib.OpslibError, match="needs a history\\(\\) frame; this one lacks"):
        opslib.plot_history(opslib.archive(conn=conn, prefix=""))
    matplotlib.pyplot.close("all")


def test_plot_history_draws_the_counts_side_by_side_on_the_whole_window() -> None:
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.dates as dates

    # Three days of hourly periods, and something happened in two hours of the last evening only.
    rows = [(at(21), "render_tickets", 3, 0, 0, 0), (at(22), "render_tickets", 1, 2, 1, 2)]
    frame = history_to_frame(rows, HOUR, start=pd.Timestamp(at(22, day=27)), end=pd.Timestamp(at(23, day=30)))
    ax = opslib.plot_history(frame)
    assert ax.get_ylabel() == "dead letters"
    bars = [bar for container in ax.containers for bar in container]
    busy = sorted((bar for bar in bars if bar.get_height() > 0), key=lambda bar: bar.get_x())
    # Side by side: every bar stands on zero, the four counts of 22:00 one after the other inside that hour.
    assert all(bar.get_y() == 0 for bar in bars)
    at_ten = [bar for bar in busy if pd.Timestamp(dates.num2date(bar.get_x())) >= pd.Timestamp(at(22))]
    assert [bar.get_height() for bar in at_ten] == [1, 2, 1, 2]
    inside = [pd.Timestamp(dates.num2date(x)) for bar in at_ten for x in (bar.get_x(), bar.get_x() + bar.get_width())]
    assert min(inside) > pd.Timestamp(at(22)) and max(inside) < pd.Timestamp(at(23))
    # The axis is the window the frame names: three days, not a trimmed or widened stretch.
    left, right = (pd.Timestamp(dates.num2date(x)) for x in ax.get_xlim())
    assert (left, right) == (pd.Timestamp(at(22, day=27)), pd.Timestamp(at(23, day=30)))
    assert ax.get_xlabel() == "window 27 Nov 22:00 – 30 Nov 23:00 UTC"
    matplotlib.pyplot.close("all")


def test_plot_history_without_matplotlib_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(
        opslib.OpslibError, match=r"plotting needs matplotlib, .* pip install 'stagedoor-jobs\[notebook\]'"
    ):
        opslib.plot_history(history_to_frame([], HOUR))


def test_sql_joins_the_archive_with_stagedoors_tables(night_archive: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """ARCHIVE_URL empty: the archive is in DATABASE_URL's database, beside the orders, and one query joins them."""
    migrate_stagedoor(night_archive)
    with psycopg.connect(night_archive, autocommit=True) as conn:
        conn.execute("INSERT INTO organizers (id, name) VALUES (1, 'Klub Kotelna')")
        conn.execute("INSERT INTO seat_maps (id, organizer_id, name) VALUES (1, 1, 'Balcony')")
        conn.execute(
            "INSERT INTO events (id, organizer_id, seat_map_id, name, starts_at) VALUES (1, 1, 1, 'Jazz', now())"
        )
        for order_id in (4471, 4472, 4473, 4474):
            conn.execute(
                "INSERT INTO orders (id, event_id, buyer_email, status) VALUES (%s, 1, %s, 'paid')",
                [order_id, f"buyer{order_id}@example.com"],
            )
    monkeypatch.setenv("DATABASE_URL", night_archive)
    joined = opslib.sql(
        """
        SELECT d.dead_id, d.status, o.id AS order_id, o.buyer_email, d.dead_at
        FROM dead_letters d
        CROSS JOIN LATERAL jsonb_array_elements(d.fields) AS field
        JOIN orders o ON field->>0 = 'order_id' AND o.id::text = field->>1
        WHERE d.queue = %s AND d.kind = 'render_tickets' AND d.status = 'dead'
        ORDER BY d.dead_at
        """,
        [""],
    )
    assert joined[["order_id", "buyer_email"]].values.tolist() == [
        [4474, "buyer4474@example.com"],
        [4472, "buyer4472@example.com"],
    ]
    assert str(joined["dead_at"].dtype) == "datetime64[ns, UTC]"
    # The same join in pandas, from archive() and the orders.
    dead = opslib.archive("render_tickets", status="dead", prefix="")
    orders = opslib.sql("SELECT id::text AS order_id, buyer_email FROM orders")
    assert dead.merge(orders, on="order_id")["buyer_email"].tolist() == [
        "buyer4474@example.com",
        "buyer4472@example.com",
    ]


def test_sql_says_where_the_archive_is_when_it_is_elsewhere(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", pg_url)
    monkeypatch.delenv("ARCHIVE_URL", raising=False)
    with pytest.raises(
        opslib.OpslibError, match=r'(?s)"dead_letters" does not exist.*`python -m worker migrate` creates dead_letters'
    ):
        opslib.sql("SELECT count(*) FROM dead_letters")
    monkeypatch.setenv("ARCHIVE_URL", "postgresql://postgres@127.0.0.1:5432/archive")
    with pytest.raises(opslib.OpslibError, match="The archive lives where ARCHIVE_URL points, not in DATABASE_URL's"):
        opslib.sql("SELECT count(*) FROM dead_letters")


def test_archive_search_finds_text_in_the_payload_error_and_ids(conn: psycopg.Connection[Any]) -> None:
    assert opslib.archive(search="4472", conn=conn, prefix="")["dead_at"].tolist() == [at(20, 20), at(23, 20)]
    assert opslib.archive(search="mailtimeout", conn=conn, prefix="")["kind"].tolist() == ["send_email"]
    first_id = opslib.archive(conn=conn, prefix="").index[0]
    assert opslib.archive(search=first_id, conn=conn, prefix="").index.tolist() == [first_id]
    assert opslib.archive(search="no such text", conn=conn, prefix="").empty
    with pytest.raises(opslib.OpslibError, match="search must be text"):
        opslib.archive(search=4472, conn=conn, prefix="")  # type: ignore[arg-type]


def test_every_column_of_the_table_is_shown_selected_or_named_as_not_shown() -> None:
    """A column added to ``worker.archive.table.COLUMNS`` reaches ``archive()`` or is left out on purpose."""
    for column in COLUMNS:
        shown = column.name in ARCHIVE_COLUMNS or column.name in NOT_SHOWN
        assert shown, f"{column.name}: add it to opslib.frames.DEAD_COLUMNS (entry) or to NOT_SHOWN"
        if column.writer == "entry" and column.name not in NOT_SHOWN:
            assert column.name in DEAD_COLUMNS, f"{column.name} comes from the entry: dead_letters() shows it too"
    assert set(ARCHIVE_SELECT) <= {column.name for column in COLUMNS}


def test_history_busy_keeps_the_periods_with_something_in_them(conn: psycopg.Connection[Any]) -> None:
    every = opslib.history(conn=conn, prefix="", since=at(18), until=at(23))
    busy = opslib.history(conn=conn, prefix="", since=at(18), until=at(23), busy=True)
    measures = ["died", "replayed", "discarded", "succeeded_after_replay"]
    assert len(busy) < len(every) and (busy[measures].sum(axis=1) > 0).all()
    assert busy[measures].sum().tolist() == every[measures].sum().tolist()
    assert every.attrs["window"] == (pd.Timestamp(at(18)), pd.Timestamp(at(23)))


def test_a_kind_a_live_worker_declares_is_known_to_the_archive_without_a_row(
    conn: psycopg.Connection[Any], r: redis.Redis, keys: Keys
) -> None:
    r.zadd(keys.workers, {"worker-1": time.time() + 60})
    r.set(keys.declared("worker-1"), json.dumps({"kinds": {"send_reminder": {}}}))
    at = {"conn": conn, "prefix": keys.prefix, "client": r}
    assert opslib.archive("send_reminder", **at).empty and opslib.history(kind="send_reminder", **at)["died"].sum() == 0
    with pytest.raises(opslib.OpslibError, match=r"unknown kind 'send_remider'; did you mean 'send_reminder'\?"):
        opslib.archive("send_remider", **at)


@pytest.mark.parametrize("enabled", [True, False])
def test_archive_reads_with_the_collector_paused_and_leaves_it_as_it_was(
    conn: psycopg.Connection[Any], enabled: bool
) -> None:
    """opslib.gc_pause: no collection while archive() reads and converts its rows (even with a threshold
    that would collect at every allocation), and the collector on or off after as it was before."""
    passes: list[str] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_name in ("read_archive", "archive_to_frame"):
                passes.append(f"{phase} in {frame.f_code.co_name}")
                return
            frame = frame.f_back

    threshold = gc.get_threshold()
    was = gc.isenabled()
    gc.callbacks.append(seen)
    gc.set_threshold(1)
    if not enabled:
        gc.disable()
    try:
        frame = opslib.archive(conn=conn, prefix="")
        after = gc.isenabled()
    finally:
        gc.callbacks.remove(seen)
        gc.set_threshold(*threshold)
        if was:
            gc.enable()
    assert len(frame) == 6 and passes == [] and after is enabled
