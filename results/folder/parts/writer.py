"""The parts a run streams into its folder, and the one writer of them.

A run that held its tables until the end would lose them all to a SIGKILL, the OOM killer or a
power cut, and its memory would grow with its length. So each table a run produces as it goes
is written in numbered parts, ``<table>.parts/part-NNNNNN.parquet``, by a :class:`PartWriter`:
each part written to a temporary name, synced to the disk and renamed
(perfmodel.files.sync_write), so a part is on disk whole or not at all. Three streams write
them, each from its own thread: the requests and their chunks (results.folder.parts.
record_stream), the engine's steps (results.folder.parts.step_parts) and the probes' samples
(probes.sample_stream). At the run's end :func:`seal_parts` makes one table of a folder's
parts (the samples: results.folder.parts.sample_parts), and :func:`read_parts` reads a folder
that was never sealed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from perfmodel.files import atomic_write, sync_write

__all__ = [
    "FLUSH_ROWS",
    "FLUSH_S",
    "REQUESTS_PARTS",
    "SAMPLES_PARTS",
    "STEPS_PARTS",
    "TOKENS_PARTS",
    "PartWriter",
    "has_parts",
    "part_files",
    "read_parts",
    "seal_parts",
]

REQUESTS_PARTS = "requests.parts"
TOKENS_PARTS = "tokens.parts"
STEPS_PARTS = "steps.parts"
SAMPLES_PARTS = "samples.parts"
# The two bounds of an unflushed buffer: seconds since its oldest record, and rows in it.
FLUSH_S = 2.0
FLUSH_ROWS = 100_000


class PartWriter:
    """Numbered parts appended to one or more parts folders in step: part N of each table
    under the same name, ``part-NNNNNN.parquet`` (module docstring). Not thread-safe: its
    stream's own lock, or its one thread, orders the writes."""

    def __init__(self, *directories: Path) -> None:
        if not directories:
            raise ValueError("PartWriter: at least one parts folder")
        self.directories = [Path(d) for d in directories]
        self.parts_written = 0
        self.rows_written = 0  # of the first table

    def write(self, *tables: pa.Table) -> None:
        """Part N of each table, in the order of the folders (a kill between two leaves the
        later ones without part N); OSError when the disk refuses one, the part then not
        counted, so the next write takes the same number."""
        name = f"part-{self.parts_written:06d}.parquet"
        for directory, table in zip(self.directories, tables, strict=True):
            sync_write(directory / name, table)
        self.parts_written += 1
        self.rows_written += tables[0].num_rows


def part_files(folder: Path, parts: str) -> list[Path]:
    """The parts of ``folder/parts``, in the order they were written."""
    directory = folder / parts
    return sorted(directory.glob("part-*.parquet")) if directory.is_dir() else []


def has_parts(folder: Path) -> bool:
    """Whether ``folder`` holds streamed records that were never sealed."""
    return bool(part_files(folder, REQUESTS_PARTS) or part_files(folder, TOKENS_PARTS))


def read_parts(folder: Path, parts: str, schema: pa.Schema) -> pa.Table:
    """Every part of ``folder/parts`` in order, as one table of ``schema`` (empty: none)."""
    tables = [pq.read_table(p) for p in part_files(folder, parts)]
    return pa.concat_tables(tables) if tables else schema.empty_table()


def seal_parts(folder: Path, parts: str, name: str, schema: pa.Schema) -> Path:
    """``folder/name`` from the parts of ``folder/parts`` (one row group each, read one at a
    time, so memory holds one part), then the parts removed. Returns the file's path."""

    def write(tmp: Path) -> None:
        with pq.ParquetWriter(tmp, schema) as writer:
            for part in part_files(folder, parts):
                writer.write_table(pq.read_table(part).select(schema.names).cast(schema))

    path = atomic_write(folder / name, write)
    shutil.rmtree(folder / parts, ignore_errors=True)
    return path
