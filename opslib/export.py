"""A month of the archive exported to Parquet, verified, and read back beside PostgreSQL.

``python -m opslib export --month 2026-10 --out DIR`` (:func:`export_month`)
writes that month's rows of the queue (``dead_at`` in the UTC month) to
``DIR/dead_letters-<queue>-2026-10.parquet``, every column of the table as it
is (``jsonb`` as its JSON text), and beside it a manifest
(``...manifest.json``): the rows, the file's sha256, the columns and their
types, the query that read them. :func:`verify_export` reads the file again:
its sha256 and row count against the manifest, and the row count against
PostgreSQL while the month is still there. A verified month can then be
dropped (``ARCHIVE_RETENTION``, or the migrator's ``SELECT
archive_drop_month('dead_letters', '2026-10-01')``), and
``opslib.archive(..., include_exported=DIR)`` reads the exported months and
PostgreSQL together (:func:`read_exported`).

Why pyarrow and not DuckDB: the export is a copy of rows, and reading it back
keeps the rows of a time window, a kind, a status or a signature, which
pyarrow's dataset filters do on the file's row groups (a month of a million
rows is read for one day in well under a second); pandas reads Parquet through
pyarrow anyway, so it is one dependency where DuckDB would be a second engine
with SQL we do not need.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd
import psycopg

from opslib.archive_frames import ARCHIVE_SELECT
from opslib.connection import pg_session, queue_keys, readable_archive_url
from opslib.errors import OpslibError
from opslib.session import Servers
from worker.archive.months import month_start
from worker.archive.table import COLUMNS, TABLE

R = TypeVar("R")
BATCH = 20_000
"""Rows fetched from PostgreSQL and written to the file at a time (memory stays bounded by a batch)."""


def arrow_schema() -> Any:
    """The Parquet columns: the table's, in order; ``jsonb`` kept as its JSON text, times in UTC."""
    import pyarrow as pa

    types = {"timestamptz": pa.timestamp("us", tz="UTC"), "integer": pa.int64(), "smallint": pa.int64()}
    return pa.schema([(c.name, types.get(c.sql.split()[0], pa.string())) for c in COLUMNS])


def parse_month(month: str) -> datetime:
    if not isinstance(month, str) or not re.fullmatch(r"[0-9]{4}-(0[1-9]|1[0-2])", month):
        raise OpslibError(f"month must be YYYY-MM (a UTC month of dead_at), e.g. 2026-10; got {month!r}")
    return datetime.strptime(month, "%Y-%m").replace(tzinfo=UTC)


def _stem(queue: str) -> str:
    """The start of the export files' names of ``queue`` (its prefix made safe for a file name)."""
    return f"{TABLE}-{re.sub(r'[^A-Za-z0-9_.-]', '_', queue) or '_'}"


def export_paths(out: Path, queue: str, month: str) -> tuple[Path, Path]:
    """The Parquet file and the manifest of ``queue``'s ``month`` in ``out``."""
    return out / f"{_stem(queue)}-{month}.parquet", out / f"{_stem(queue)}-{month}.manifest.json"


def _select() -> str:
    return ", ".join(f"{c.name}::text" if c.sql.startswith("jsonb") else c.name for c in COLUMNS)


def export_month(month: str, out: str | Path, *, conn: Any = None, prefix: str | None = None) -> dict[str, Any]:
    """Write ``month``'s rows of the queue to Parquet in ``out`` with their manifest; the manifest, verified."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    start = parse_month(month)
    queue = queue_keys(prefix).prefix
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    path, manifest_path = export_paths(folder, queue, month)
    query = (
        f"SELECT {_select()} FROM {TABLE} WHERE queue = %(queue)s AND dead_at >= %(start)s AND dead_at < %(end)s"
        " ORDER BY dead_at, partition, dead_id"
    )
    params = {"queue": queue, "start": start, "end": month_start(start, 1)}
    schema = arrow_schema()
    partial = path.with_suffix(".parquet.partial")
    rows = 0
    try:
        with (
            pg_session(conn, readable_archive_url, "ARCHIVE_URL") as connection,
            connection.transaction(),
            connection.cursor(name="opslib_export") as cur,
            pq.ParquetWriter(partial, schema) as writer,
        ):
            cur.execute(query, params)
            while batch := cur.fetchmany(BATCH):
                columns = [pa.array(c, f.type) for c, f in zip(zip(*batch, strict=True), schema, strict=True)]
                writer.write_table(pa.Table.from_arrays(columns, schema=schema))
                rows += len(batch)
    except psycopg.Error as exc:
        partial.unlink(missing_ok=True)
        raise OpslibError(f"exporting {month} failed: {str(exc).strip()}") from None
    partial.replace(path)
    manifest = {
        "table": TABLE,
        "queue": queue,
        "month": month,
        "rows": rows,
        "file": path.name,
        "sha256": _sha256(path),
        "columns": [{"name": field.name, "type": str(field.type)} for field in schema],
        "query": query,
        "exported_at": datetime.now(UTC).isoformat(),
    }
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    return verify_export(month, folder, conn=conn, prefix=prefix)


def verify_export(month: str, out: str | Path, *, conn: Any = None, prefix: str | None = None) -> dict[str, Any]:
    """The manifest of ``month`` in ``out`` once its file's sha256 and rows match it (and PostgreSQL's rows
    while the month is still there); an :class:`OpslibError` saying what differs otherwise."""
    import pyarrow.parquet as pq

    start = parse_month(month)
    queue = queue_keys(prefix).prefix
    path, manifest_path = export_paths(Path(out), queue, month)
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as exc:
        raise OpslibError(f"no readable manifest of {month} at {manifest_path} ({exc}); export it first") from None
    if not path.exists() or _sha256(path) != manifest["sha256"]:
        raise OpslibError(f"{path} does not match its manifest's sha256: export {month} again")
    if (in_file := pq.ParquetFile(path).metadata.num_rows) != manifest["rows"]:
        raise OpslibError(f"{path} holds {in_file} rows, its manifest {manifest['rows']}: export {month} again")
    with pg_session(conn, readable_archive_url, "ARCHIVE_URL") as connection:
        row = connection.execute(
            f"SELECT count(*) FROM {TABLE} WHERE queue = %s AND dead_at >= %s AND dead_at < %s",
            (queue, start, month_start(start, 1)),
        ).fetchone()
    in_database = row[0] if row else 0
    if in_database not in (0, manifest["rows"]):
        raise OpslibError(
            f"PostgreSQL holds {in_database} rows of {month}, the export {manifest['rows']}: export {month} again"
        )
    return dict(manifest)


def read_exported(out: str | Path, queue: str, select: Sequence[str], where: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The rows (``select``'s columns, oldest first) of the exported months of ``queue`` in ``out`` that
    match ``where``: ``died_from`` / ``died_before`` (times or None) and equality on any other column."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    folder = Path(out)
    if not folder.is_dir():
        raise OpslibError(f"include_exported={str(out)!r} is not a folder; give the --out of `python -m opslib export`")
    files = sorted(str(p) for p in folder.glob(f"{_stem(queue)}-????-??.parquet"))
    if not files:
        return []
    condition = pc.field("queue") == queue
    for name, value in where.items():
        if value is None:
            continue
        if name == "died_from":
            condition &= pc.field("dead_at") >= pd.Timestamp(value)
        elif name == "died_before":
            condition &= pc.field("dead_at") < pd.Timestamp(value)
        else:
            condition &= pc.field(name) == value
    table = ds.dataset(files, format="parquet").to_table(columns=list(select), filter=condition)
    rows = table.sort_by([("dead_at", "ascending")]).to_pylist()
    return [tuple(json.loads(r[c]) if c == "fields" else r[c] for c in select) for r in rows]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def merged(
    newest_first: Sequence[Sequence[Any]], out: str | Path, queue: str, where: dict[str, Any], limit: int | None
) -> list[Sequence[Any]]:
    """``archive()``'s rows from PostgreSQL (newest first) and the exported months' of ``where`` together,
    oldest first, the most recent ``limit``; a row in both (a month exported, not yet dropped) is PostgreSQL's."""
    if where.get("search") is not None:
        raise OpslibError("search= reads PostgreSQL only; with include_exported, filter the frame instead")
    select = ARCHIVE_SELECT
    at, part, dead_id = (select.index(name) for name in ("dead_at", "partition", "dead_id"))
    held = {(row[part], row[dead_id]) for row in newest_first}
    exported = read_exported(out, queue, select, where)
    rows = [*newest_first, *(row for row in exported if (row[part], row[dead_id]) not in held)]
    rows.sort(key=lambda row: (row[at], len(row[dead_id]), row[dead_id]))
    return rows[-limit:] if limit else rows


@dataclass(frozen=True)
class ArchiveSources(Servers):
    """The servers of an ``archive()`` call and the folder of exported months it reads too (None: none)."""

    exported: str | Path | None = None


def with_exported(function: Callable[..., R]) -> Callable[..., R]:
    """``function`` (which takes ``servers``) also taking ``include_exported=``, handed down inside its
    ``servers`` as :class:`ArchiveSources` (under :func:`~opslib.session.with_servers`)."""
    own = inspect.signature(function)

    @functools.wraps(function)
    def call(*args: Any, servers: Servers, include_exported: str | Path | None = None, **given: Any) -> R:
        sources = ArchiveSources(servers.client, servers.prefix, servers.conn, include_exported)
        return function(*args, servers=sources, **given)

    shown = inspect.Parameter(
        "include_exported", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="str | Path | None"
    )
    parameters = list(own.parameters.values())
    call.__signature__ = own.replace(parameters=[*parameters[:-1], shown, parameters[-1]])  # type: ignore[attr-defined]
    return call
