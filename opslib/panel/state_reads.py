"""The dashboard's lists of jobs in each state, as one shape of frame (waiting, running, delayed, archived).

Each reader returns a *listing*: index ``id`` (str: what the tab's actions
take: the entry id on ``jobs`` for waiting and running jobs, the job id for
delayed ones, the dead id for archived entries), then ``at``
(datetime64[ns, UTC]: when the job entered the state the tab shows: enqueued,
last delivered, due to run, died), ``kind``, ``job_id`` and ``detail`` (str: a
line on where it is and its payload, searched with the rest), and ``queue``
when the frame it comes from has that column (named queues). The tab filters
a listing with :func:`filter_listing` and never changes it.

Waiting jobs are the entries of every partition's ``jobs`` after the
consumer group's last delivered id (read in pages), then the jobs a pause
parked (``parked``), at most :data:`LISTED` in all; the others come from
``pending()``, ``delayed()`` and ``archive()``.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import redis

from opslib.archive import archive
from opslib.bounded import Scan, stream_entries, zset_members
from opslib.columns import TEXT, TIME, entry_times, typed_frame
from opslib.connection import partitions, redis_session
from opslib.display import duration
from opslib.frames import fields_of, job_id_of
from opslib.panel.filters import ALL_KINDS, Filters
from opslib.queries import delayed, pending
from worker.store.keys import GROUP, Keys
from worker.store.wire import parked_fields, text

LISTED = 2_000
"""A tab lists at most this many jobs (the newest archived entries, the first waiting ones)."""
LISTING_COLUMNS = {"at": TIME, "kind": TEXT, "job_id": TEXT, "detail": TEXT}
#: Fields of a job that are not its payload, left out of the detail line.
NOT_PAYLOAD = {"kind", "job_id", "attempts", "traceparent", "tracestate", "request_id", "v", "attempt_log"}


def payload_line(fields: dict[str, str]) -> str:
    """``order_id=41 seat=14-C``: the payload's own fields, sorted, as one line (plain text)."""
    return " ".join(f"{name}={value}" for name, value in sorted(fields.items()) if name not in NOT_PAYLOAD)


def listing(ids: list[str], columns: dict[str, list[Any]]) -> pd.DataFrame:
    """A listing of these rows (``queue`` kept when given), typed as :data:`LISTING_COLUMNS` say."""
    dtypes = {**LISTING_COLUMNS, **({"queue": TEXT} if "queue" in columns else {})}
    return typed_frame(columns, dtypes, index=pd.Index(ids, dtype=TEXT, name="id"))


def undelivered(client: Any, keys: Keys, limit: int) -> list[tuple[str, dict[str, str]]]:
    """The first ``limit`` entries of one partition's ``jobs`` that no worker has read yet."""
    last = "0-0"
    try:
        for group in client.xinfo_groups(keys.jobs):
            if text(group["name"]) == GROUP:
                last = text(group["last-delivered-id"])
    except redis.exceptions.ResponseError:  # no stream yet
        return []
    scan = Scan(f"waiting ({keys.jobs})")
    found = []
    for entry_id, raw in stream_entries(client, keys.jobs, scan, f"({last}"):
        found.append((text(entry_id), fields_of(raw)))
        if len(found) >= limit:
            break
    return found


def parked(client: Any, keys: Keys, limit: int) -> list[tuple[str, pd.Timestamp, dict[str, str]]]:
    """The first ``limit`` jobs of one partition's ``parked`` (their kind is paused): (job id, the time of
    their place on the queue, fields); a member that cannot be read is left to the worker."""
    found = []
    for member in zset_members(client, keys.parked, Scan(f"parked ({keys.parked})")):
        try:
            fields = parked_fields(member)
        except ValueError:
            continue
        order = member.split(b"\0", 2)[1]
        found.append((job_id_of(fields), pd.Timestamp(int(order.split(b"-")[0]), unit="ms", tz="UTC"), fields))
        if len(found) >= limit:
            break
    return found


def waiting_listing(*, client: redis.Redis | None = None, prefix: str | None = None) -> pd.DataFrame:
    """The jobs on ``jobs`` that no worker has read yet, oldest first, then those parked by a pause (their
    id is the job id, which ``opslib.cancel`` takes too), over every partition."""
    with redis_session(client, prefix, "read the waiting jobs") as (redis_client, keys):
        parts = partitions(redis_client, keys)
        queued = [row for part in parts for row in undelivered(redis_client, part, LISTED)][:LISTED]
        held = [row for part in parts for row in parked(redis_client, part, LISTED)][: LISTED - len(queued)]
    ids = [entry_id for entry_id, _fields in queued] + [job_id for job_id, _at, _fields in held]
    every = [fields for _id, fields in queued] + [fields for _id, _at, fields in held]
    columns: dict[str, list[Any]] = {
        "at": [*entry_times(ids[: len(queued)]), *(at for _id, at, _fields in held)],
        "kind": [fields.get("kind", "") for fields in every],
        "job_id": [job_id_of(fields) for fields in every],
        "detail": [payload_line(fields) for _id, fields in queued]
        + [f"parked: its kind is paused · {payload_line(fields)}" for _id, _at, fields in held],
    }
    if any("queue" in fields for fields in every):
        columns["queue"] = [fields.get("queue", "") for fields in every]
    return listing(ids, columns)


def running_listing(**at: Any) -> pd.DataFrame:
    """The entries delivered to a worker and not acknowledged yet; ``at``: their last delivery."""
    running = pending(**at).head(LISTED)
    now = pd.Timestamp.now(tz="UTC")
    columns = {
        "at": list(now - running["idle"]),
        "kind": running["kind"].tolist(),
        "job_id": running["job_id"].tolist(),
        "detail": [
            f"on {row.consumer}, idle {duration(row.idle)}, delivered {row.deliveries}×" for row in running.itertuples()
        ],
        **({"queue": running["queue"].tolist()} if "queue" in running else {}),
    }
    return listing([str(entry_id) for entry_id in running.index], columns)


def delayed_listing(**at: Any) -> pd.DataFrame:
    """The jobs in ``delayed`` by job id (what Run now and Cancel take), soonest first; ``at``: their run time."""
    jobs = delayed(**at)
    jobs = jobs[jobs["job_id"] != ""].drop_duplicates("job_id").head(LISTED)
    columns = {
        "at": jobs["run_at"].tolist(),
        "kind": jobs["kind"].tolist(),
        "job_id": jobs["job_id"].tolist(),
        "detail": [
            f"{'due' if row.due else 'later'}, {row.attempts} failed attempts · {payload_line(row.fields)}"
            for row in jobs.itertuples()
        ],
        **({"queue": jobs["queue"].tolist()} if "queue" in jobs else {}),
    }
    return listing(jobs["job_id"].tolist(), columns)


def archived_listing(**at: Any) -> pd.DataFrame:
    """The newest :data:`LISTED` entries of the archive, newest first; ``at``: when they died; the detail
    starts with what became of them (dead, replayed, discarded)."""
    rows = archive(limit=LISTED, **at).iloc[::-1]  # PostgreSQL keeps the newest; oldest first -> newest first
    columns = {
        "at": rows["dead_at"].tolist(),
        "kind": rows["kind"].tolist(),
        "job_id": rows["job_id"].tolist(),
        "detail": [f"{row.status} · {row.error}" for row in rows.itertuples()],
        **({"queue": rows["queue"].tolist()} if "queue" in rows else {}),
    }
    return listing([str(dead_id) for dead_id in rows.index], columns)


def filter_listing(rows: pd.DataFrame, filters: Filters, queue: str = "") -> pd.DataFrame:
    """The rows of a listing the filters keep: kind, queue, a case-insensitive substring of the id or any
    text column, and ``at`` within From / To."""
    if rows.empty:
        return rows
    mask = pd.Series(True, index=rows.index)
    if filters.kind != ALL_KINDS:
        mask &= rows["kind"] == filters.kind
    if queue and "queue" in rows:
        mask &= rows["queue"] == queue
    if filters.search:
        needle = filters.search.casefold()
        found = rows.index.to_series().str.casefold().str.contains(needle, regex=False)
        for name in ("kind", "job_id", "detail"):
            found |= rows[name].str.casefold().str.contains(needle, regex=False)
        mask &= found
    if filters.since is not None:
        mask &= rows["at"] >= filters.since
    if filters.until is not None:
        mask &= rows["at"] < filters.until
    return rows[mask]
