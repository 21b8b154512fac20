"""The one writer of a run's parts: numbered parts written in step across tables, each whole,
and a part the disk refused written again under the same number."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from results.folder.parts import writer
from results.folder.parts.writer import PartWriter, part_files, read_parts, seal_parts

SCHEMA = pa.schema([("x", pa.int64())])


def _table(*values: int) -> pa.Table:
    return pa.table({"x": list(values)}, schema=SCHEMA)


def test_parts_of_several_tables_share_their_numbers(tmp_path: Path) -> None:
    parts = PartWriter(tmp_path / "a.parts", tmp_path / "b.parts")
    parts.write(_table(1, 2), _table(10))
    parts.write(_table(3), _table(20, 30))
    names = [p.name for p in part_files(tmp_path, "a.parts")]
    assert names == ["part-000000.parquet", "part-000001.parquet"]
    assert names == [p.name for p in part_files(tmp_path, "b.parts")]
    assert (parts.parts_written, parts.rows_written) == (2, 3)
    assert read_parts(tmp_path, "b.parts", SCHEMA)["x"].to_pylist() == [10, 20, 30]
    sealed = seal_parts(tmp_path, "a.parts", "a.parquet", SCHEMA)
    assert pq.read_table(sealed)["x"].to_pylist() == [1, 2, 3]
    assert pq.ParquetFile(sealed).num_row_groups == 2  # one row group a part
    assert not (tmp_path / "a.parts").exists()


def test_a_refused_part_keeps_its_number(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parts = PartWriter(tmp_path / "a.parts")
    real = writer.sync_write

    def full_disk(path: Path, table: pa.Table) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer, "sync_write", full_disk)
    with pytest.raises(OSError, match="No space"):
        parts.write(_table(1))
    assert parts.parts_written == 0
    monkeypatch.setattr(writer, "sync_write", real)
    parts.write(_table(1))
    assert [p.name for p in part_files(tmp_path, "a.parts")] == ["part-000000.parquet"]
