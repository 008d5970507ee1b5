"""A month of the archive exported to Parquet: the manifest verifies, the month can be dropped, and
``archive(include_exported=DIR)`` reads it back beside PostgreSQL as if it had never left."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pyarrow.parquet as pq
import pytest

import opslib
from opslib.cli import main
from opslib.export import export_month, verify_export
from tests.opslib.helpers_archive import dead_row, insert_rows
from worker.archive.table import COLUMN_NAMES, migrate


def when(month: int, day: int, hour: int = 12) -> datetime:
    return datetime(2026, month, day, hour, tzinfo=UTC)


ROWS = [
    *(dead_row(when(10, 1 + i % 28, i % 24), "send_email", seq=i, payload={"order_id": str(i)}) for i in range(300)),
    dead_row(when(10, 31, 23), "render_tickets", status="replayed", replayed_at=when(11, 1), replay_batch="b1"),
    dead_row(when(10, 5), "send_email", queue="other:"),
    *(dead_row(when(11, 2 + i % 20), "render_tickets", seq=i) for i in range(50)),
]


@pytest.fixture
def month_archive(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    for name in ("ARCHIVE_URL", "DATABASE_URL", "QUEUE_PREFIX"):
        monkeypatch.delenv(name, raising=False)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        migrate(conn)
        conn.execute("SELECT archive_ready_month('dead_letters', %s)", (when(10, 1),))
        conn.execute("SELECT archive_ready_month('dead_letters', %s)", (when(11, 1),))
        insert_rows(conn, ROWS)
    return pg_url


def test_a_month_exported_verifies_and_reads_back_after_it_is_dropped(month_archive: str, tmp_path: Path) -> None:
    before = opslib.archive(conn=month_archive, prefix="")
    manifest = export_month("2026-10", tmp_path, conn=month_archive, prefix="")

    path = tmp_path / manifest["file"]
    assert manifest["rows"] == 301 == pq.ParquetFile(path).metadata.num_rows  # this queue's October only
    assert manifest["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert [c["name"] for c in manifest["columns"]] == list(COLUMN_NAMES)
    assert "dead_at >= %(start)s AND dead_at < %(end)s" in manifest["query"]
    assert json.loads((tmp_path / "dead_letters-_-2026-10.manifest.json").read_text()) == manifest

    # Exported and still in PostgreSQL: read once, not twice.
    both = opslib.archive(conn=month_archive, prefix="", include_exported=tmp_path)
    assert both.index.tolist() == before.index.tolist()

    with psycopg.connect(month_archive, autocommit=True) as conn:
        assert conn.execute("SELECT archive_drop_month('dead_letters', %s)", (when(10, 1),)).fetchone() == (True,)
    assert verify_export("2026-10", tmp_path, conn=month_archive, prefix="")["rows"] == 301
    assert len(opslib.archive(conn=month_archive, prefix="")) == 50
    after = opslib.archive(conn=month_archive, prefix="", include_exported=tmp_path)
    assert after.index.tolist() == before.index.tolist()
    assert after.equals(before)  # every column and dtype, the payload's fields included
    window = opslib.archive(
        "render_tickets", since="2026-10-31 00:00 UTC", until="2026-11-03 00:00 UTC", status="replayed",
        conn=month_archive, prefix="", include_exported=tmp_path,
    )  # fmt: skip
    assert window["replay_batch"].tolist() == ["b1"]
    last = opslib.archive(conn=month_archive, prefix="", include_exported=tmp_path, limit=60)
    assert last.index.tolist() == before.index.tolist()[-60:]


def test_a_file_that_changed_since_its_export_does_not_verify(month_archive: str, tmp_path: Path) -> None:
    manifest = export_month("2026-11", tmp_path, conn=month_archive, prefix="")
    assert manifest["rows"] == 50
    path = tmp_path / manifest["file"]
    path.write_bytes(path.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(opslib.OpslibError, match=r"does not match its manifest's sha256: export 2026-11 again"):
        verify_export("2026-11", tmp_path, conn=month_archive, prefix="")


def test_python_m_opslib_export_says_what_it_wrote_and_refuses_a_bad_month(
    month_archive: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ARCHIVE_URL", month_archive)
    assert main(["export", "--month", "2026-10", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith(
        f"exported 301 rows of 2026-10 to {tmp_path}/dead_letters-_-2026-10.parquet, verified"
    )
    assert main(["export", "--month", "2026-13", "--out", str(tmp_path)]) == 1
    assert (
        capsys.readouterr().err
        == "error: month must be YYYY-MM (a UTC month of dead_at), e.g. 2026-10; got '2026-13'\n"
    )
    with pytest.raises(opslib.OpslibError, match=r"^search= reads PostgreSQL only"):
        opslib.archive(conn=month_archive, prefix="", include_exported=tmp_path, search="x")
