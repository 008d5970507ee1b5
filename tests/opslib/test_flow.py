"""opslib.throughput(): the workers' flow counters per kind and period, and the pure converter behind it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
import redis

import opslib
from opslib.errors import OpslibError
from opslib.flow_frames import THROUGHPUT_COLUMNS, flow_to_frame, percentiles
from tests.helpers import Workers
from worker import NewJob, enqueue_many
from worker.store.flow import BOUNDS_S, BUCKETS, HOUR_S
from worker.store.keys import Keys

KINDS = "tests.opslib.kinds_flow"
START = pd.Timestamp("2026-12-01 14:00", tz="UTC")


def epoch(stamp: pd.Timestamp) -> int:
    return int(stamp.timestamp())


def test_an_empty_window_keeps_the_columns_and_dtypes() -> None:
    frame = flow_to_frame([], "1min", start=START, end=START + pd.Timedelta("10min"))
    assert list(frame.columns) == list(THROUGHPUT_COLUMNS)
    assert {name: str(dtype) for name, dtype in frame.dtypes.items()} == THROUGHPUT_COLUMNS
    assert frame.empty


def test_minutes_are_summed_into_periods_with_zeros_where_nothing_happened() -> None:
    raw = [
        (epoch(START), "default", "print", {"succeeded": 3, "wait:0": 3, "run:10": 3}),
        (epoch(START + pd.Timedelta("1min")), "default", "print", {"succeeded": 2, "dead": 1, "retried": 4}),
        (epoch(START + pd.Timedelta("7min")), "default", "mail", {"dead": 5}),
        (epoch(START + pd.Timedelta("10min")), "default", "mail", {"dead": 100}),  # after the window
        (epoch(START - pd.Timedelta("1min")), "default", "mail", {"dead": 100}),  # before it
    ]
    frame = flow_to_frame(raw, "5min", start=START, end=START + pd.Timedelta("10min"))
    assert frame[["period", "kind", "succeeded", "retried", "dead"]].values.tolist() == [
        [START, "mail", 0, 0, 0],
        [START, "print", 5, 4, 1],
        [START + pd.Timedelta("5min"), "mail", 0, 0, 5],
        [START + pd.Timedelta("5min"), "print", 0, 0, 0],
    ]
    first = frame.iloc[1]
    assert BOUNDS_S[9] < first["run_p50_s"] <= BOUNDS_S[10]
    assert first["wait_p95_s"] <= BOUNDS_S[0]
    assert np.isnan(frame.iloc[0]["wait_p50_s"])  # mail never started in that period


def test_before_the_cut_rows_are_hours() -> None:
    cut = START + pd.Timedelta("2h")
    raw = [
        (epoch(START), "default", "print", {"succeeded": 60}),
        (epoch(START + pd.Timedelta("1h")), "default", "print", {"succeeded": 30}),
        (epoch(cut + pd.Timedelta("1min")), "default", "print", {"succeeded": 1}),
    ]
    frame = flow_to_frame(raw, "1min", start=START, end=cut + pd.Timedelta("3min"), cut=cut)
    assert frame["period"].tolist() == [
        START,
        START + pd.Timedelta("1h"),
        cut,
        cut + pd.Timedelta("1min"),
        cut + pd.Timedelta("2min"),
    ]
    assert frame["succeeded"].tolist() == [60, 30, 0, 1, 0]


def test_percentiles_fall_in_the_bucket_of_the_exact_value() -> None:
    buckets = np.zeros((1, BUCKETS), dtype=np.int64)
    buckets[0, 5] = 90  # times up to BOUNDS_S[5]
    buckets[0, 12] = 10
    assert BOUNDS_S[4] < percentiles(buckets, 0.5)[0] <= BOUNDS_S[5]
    assert BOUNDS_S[11] < percentiles(buckets, 0.95)[0] <= BOUNDS_S[12]


def test_a_too_fine_freq_is_refused_in_one_line(at: dict[str, Any]) -> None:
    with pytest.raises(OpslibError, match="whole minutes"):
        opslib.throughput(freq="30s", **at)


def test_counts_are_exact_for_what_the_workers_ran(
    r: redis.Redis, keys: Keys, workers: Workers, at: dict[str, Any]
) -> None:
    jobs = (
        [NewJob("flow_ok", {"order_id": str(n)}) for n in range(300)]
        + [NewJob("flow_refused", {"order_id": str(n)}) for n in range(30)]
        + [NewJob("flow_flaky", {"order_id": str(n)}) for n in range(20)]
    )
    enqueue_many(r, jobs, prefix=keys.prefix)
    workers.burst(KINDS, ARCHIVE_URL="off")
    frame = opslib.throughput(since="15min", **at)
    totals = frame.groupby("kind")[["succeeded", "retried", "dead"]].sum()
    assert totals.to_dict("index") == {
        "flow_ok": {"succeeded": 300, "retried": 0, "dead": 0},
        "flow_refused": {"succeeded": 0, "retried": 0, "dead": 30},
        "flow_flaky": {"succeeded": 0, "retried": 20, "dead": 20},
    }
    busy = frame[frame["succeeded"] > 0]
    assert busy["wait_p50_s"].notna().all() and busy["run_p95_s"].notna().all()
    assert opslib.throughput("flow_flaky", since="15min", **at)["kind"].unique().tolist() == ["flow_flaky"]
    hours = opslib.throughput(freq="1h", since="2h", **at)
    assert hours["succeeded"].sum() == 300


def test_each_queue_has_its_own_rows(r: redis.Redis, keys: Keys, workers: Workers, at: dict[str, Any]) -> None:
    enqueue_many(r, [NewJob("flow_ok", queue="bulk"), NewJob("flow_ok"), NewJob("flow_ok")], prefix=keys.prefix)
    workers.here(KINDS, ARCHIVE_URL="off", WORKER_QUEUES="default,bulk")
    frame = opslib.throughput(since="15min", busy=True, **at)
    totals = frame.groupby(["queue", "kind"])["succeeded"].sum()
    assert totals.to_dict() == {("bulk", "flow_ok"): 1, ("default", "flow_ok"): 2}
    assert r.exists(Keys(keys.prefix, queue="bulk").flow_kinds)


def test_an_unknown_kind_names_the_kinds_counted(
    r: redis.Redis, keys: Keys, workers: Workers, at: dict[str, Any]
) -> None:
    enqueue_many(r, [NewJob("flow_ok")], prefix=keys.prefix)
    workers.burst(KINDS, ARCHIVE_URL="off")
    with pytest.raises(OpslibError, match="did you mean 'flow_ok'"):
        opslib.throughput("flow_okk", **at)


def test_hour_hashes_expire_after_the_retention(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    enqueue_many(r, [NewJob("flow_ok")], prefix=keys.prefix)
    workers.burst(KINDS, ARCHIVE_URL="off", FLOW_RETENTION="2")
    hour_keys = list(r.scan_iter(match=f"{keys.prefix}flow:h:*", count=1000))
    minute_keys = list(r.scan_iter(match=f"{keys.prefix}flow:m:*", count=1000))
    assert hour_keys and minute_keys
    assert all(r.ttl(k) <= 2 * 86_400 + 2 * HOUR_S for k in hour_keys)
    assert all(r.ttl(k) <= 86_400 + HOUR_S + 60 for k in minute_keys)


def test_flow_retention_zero_counts_nothing(r: redis.Redis, keys: Keys, workers: Workers) -> None:
    enqueue_many(r, [NewJob("flow_ok")], prefix=keys.prefix)
    workers.burst(KINDS, ARCHIVE_URL="off", FLOW_RETENTION="0")
    assert not list(r.scan_iter(match=f"{keys.prefix}flow:*", count=1000))


def test_plot_throughput_draws_jobs_and_retried_attempts_side_by_side_on_the_window() -> None:
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.dates as dates

    raw = [
        (epoch(START), "default", "print", {"succeeded": 3, "wait:4": 3}),
        (
            epoch(START + pd.Timedelta("6min")),
            "default",
            "print",
            {"succeeded": 2, "dead": 1, "retried": 4, "wait:9": 7},
        ),
        (epoch(START + pd.Timedelta("7min")), "default", "mail", {"dead": 5}),
    ]
    frame = flow_to_frame(raw, "5min", start=START, end=START + pd.Timedelta("10min"))
    ax = opslib.plot_throughput(frame)
    succeeded, dead, retried = ax.containers
    assert [c.get_label() for c in ax.containers] == ["succeeded (jobs)", "failed: dead (jobs)", "retried (attempts)"]
    assert [bar.get_height() for bar in succeeded] == [3, 2]
    assert [bar.get_height() for bar in dead] == [0, 6]  # failed: the jobs that died, not the attempts
    assert [bar.get_height() for bar in retried] == [0, 4]
    assert all(bar.get_y() == 0 for container in ax.containers for bar in container)  # side by side, not stacked
    assert succeeded[1].get_x() < dead[1].get_x() < retried[1].get_x()
    left, right = (pd.Timestamp(dates.num2date(x)) for x in ax.get_xlim())
    assert (left, right) == (START, START + pd.Timedelta("10min"))  # the window it names, no more
    assert ax.get_xlabel() == "window 01 Dec 14:00 – 01 Dec 14:10 UTC"
    assert not [t for t in ax.texts if t.get_text().strip() == "now"]  # a window of the past: no "now"
    wait_line = ax.figure.axes[1].lines[0]
    assert BOUNDS_S[8] < wait_line.get_ydata()[1] <= BOUNDS_S[9]
    assert ax.get_title(loc="left") == "jobs per 5 minutes"
    assert ax.get_ylabel() == "jobs (retried: attempts)"
    one = opslib.plot_throughput(frame, kind="mail")
    assert [bar.get_height() for bar in one.containers[1]] == [0, 5]
    matplotlib.pyplot.close("all")


def test_a_window_ending_now_is_marked_and_periods_past_retention_are_not_kept() -> None:
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    now = pd.Timestamp.now(tz="UTC")
    kept_from = (now - pd.Timedelta("2h")).ceil("1h")
    start = kept_from - pd.Timedelta("3h")
    raw = [
        (epoch(kept_from - pd.Timedelta("2h")), "default", "print", {"succeeded": 9}),
        (epoch(now), "default", "print", {"dead": 1}),
    ]
    frame = flow_to_frame(raw, "1h", start=start, end=now, kept_from=kept_from)
    gone = frame[frame["period"] < kept_from]
    assert len(gone) == 3 and gone[["succeeded", "retried", "dead", "wait_p95_s"]].isna().all().all()  # not 0, not 9
    assert (frame.loc[frame["period"] >= kept_from, "retried"] == 0).all()
    assert frame["dead"].sum() == 1 and frame.attrs["kept_from"] == kept_from
    ax = opslib.plot_throughput(frame)
    texts = [t.get_text().strip() for t in ax.texts]
    assert "now" in texts and "not kept" in texts
    matplotlib.pyplot.close("all")


def test_busy_keeps_the_periods_where_something_happened(
    r: redis.Redis, keys: Keys, workers: Workers, at: dict[str, Any]
) -> None:
    enqueue_many(r, [NewJob("flow_ok"), NewJob("flow_refused")], prefix=keys.prefix)
    workers.burst(KINDS, ARCHIVE_URL="off")
    every = opslib.throughput(since="1h", **at)
    busy = opslib.throughput(since="1h", busy=True, **at)
    assert len(every) >= 60 and 1 <= len(busy) <= 4
    assert busy[["succeeded", "dead"]].sum().tolist() == [1, 1]


def test_a_window_reaching_past_retention_reads_only_what_is_kept(
    r: redis.Redis, keys: Keys, workers: Workers, at: dict[str, Any]
) -> None:
    """``since=9pm`` was year 1 and a MemoryError; now it is last 9 pm, and a window of years reads what is
    kept, its older periods missing ("not kept"), or is refused before any read when it has too many periods."""
    enqueue_many(r, [NewJob("flow_ok")], prefix=keys.prefix)
    workers.burst(KINDS, ARCHIVE_URL="off")
    evening = opslib.throughput(since="9pm", freq="1h", **at)
    assert evening["period"].min() >= pd.Timestamp.now(tz="UTC") - pd.Timedelta("25h")
    assert evening["succeeded"].sum() == 1
    years = opslib.throughput(since="2020-01-01", freq="1D", **at)
    kept_from = years.attrs["kept_from"]
    assert kept_from >= pd.Timestamp.now(tz="UTC") - pd.Timedelta("8D") - pd.Timedelta("1h")
    assert years.loc[years["period"] < kept_from, "succeeded"].isna().all()
    assert years["succeeded"].sum() == 1 and len(years) > 2000
    with pytest.raises(
        OpslibError, match=r"[\d,]+ periods of 1min for 1 kind is too long to show; choose a longer freq"
    ):
        opslib.throughput(since="1971-01-01", freq="1min", **at)


def test_the_bars_of_a_period_under_way_stay_on_the_axis() -> None:
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.dates as dates

    end = START + pd.Timedelta("40min")  # the last hour has run 40 minutes when the window ends
    raw = [(epoch(START), "default", "print", {"succeeded": 3, "dead": 1, "retried": 2})]
    ax = opslib.plot_throughput(flow_to_frame(raw, "1h", start=START - pd.Timedelta("1h"), end=end))
    right = ax.get_xlim()[1]
    assert pd.Timestamp(dates.num2date(right)) == end
    assert all(bar.get_x() + bar.get_width() <= right + 1e-9 for c in ax.containers for bar in c if bar.get_height())
    matplotlib.pyplot.close("all")
