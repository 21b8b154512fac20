"""Request and chunk records streamed into a run folder while the run goes on.

A run that holds its records until the end loses all of them to a SIGKILL, the OOM killer or
a power cut, and its memory grows with its length. :class:`RecordStream` takes each finished
RequestRecord as it comes and appends it, with its chunks, to the folder in parts: every
``flush_s`` seconds (a timer thread, so a quiet spell flushes too) or every ``flush_rows``
rows (requests plus chunks), whichever comes first, it writes one part of requests and one of
tokens (``requests.parts/part-NNNNNN.parquet``, ``tokens.parts/...``), each written to a
temporary name, synced to the disk and renamed, so a part is on disk whole or not at all.
Once a record's chunks are on disk the record lets go of them (``chunks`` emptied): the
caller may keep the slim record, never the chunks.

A killed run therefore keeps every record that finished more than ``flush_s`` seconds (plus
the time one part takes to write) before the kill; it loses the records of its last flush
interval and the requests in flight, which had no record yet. :meth:`RecordStream.close` (a
run that ends, or is interrupted by SIGINT/SIGTERM, which still ends it) writes the rest;
:func:`seal_parts` then makes requests.parquet and tokens.parquet of the parts, one row group
per part, reading one part at a time, and removes the parts. :func:`read_parts` reads the
parts of a folder that was never sealed (results.folder.run_folder.load_run).

The probes' samples are streamed the same way, by the process that takes them
(probes.sample_stream): ``samples.parts/part-NNNNNN.parquet``, every ``flush_s`` seconds, each
the readings taken since the last (results.folder.tables.SAMPLE_PART_SCHEMA: on the probes'
clock, with the index of the sampler that took each). :func:`seal_samples` makes samples.parquet
of them and :func:`read_sample_parts` reads them unsealed: both put the readings on the run's
clock (:func:`sample_times_s`) and in the order one table of every sampler's readings, sorted
stably by time, has (by time, then sampler, then the order each sampler took them), so the
table is the one a run that held its samples to the end would write.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from perfmodel.files import atomic_write, sync_write
from results.folder.table_columns import SAMPLE_PART_SAMPLER
from results.folder.tables import (
    SAMPLE_PART_SCHEMA,
    SAMPLES_SCHEMA,
    requests_table,
    tokens_table,
)

__all__ = [
    "FLUSH_ROWS",
    "FLUSH_S",
    "REQUESTS_PARTS",
    "SAMPLES_PARTS",
    "STEPS_PARTS",
    "TOKENS_PARTS",
    "RecordStream",
    "has_parts",
    "part_files",
    "read_parts",
    "read_sample_parts",
    "sample_times_s",
    "seal_parts",
    "seal_samples",
    "sync_write",
]

REQUESTS_PARTS = "requests.parts"
TOKENS_PARTS = "tokens.parts"
# Engine steps streamed in parts likewise (results.folder.step_parts), sealed into steps.parquet.
STEPS_PARTS = "steps.parts"
SAMPLES_PARTS = "samples.parts"
# Readings a row group of a sealed samples.parquet holds (a part holds one flush interval's).
SAMPLES_ROW_GROUP = 65_536
# The two bounds of an unflushed buffer: seconds since its oldest record, and rows in it.
FLUSH_S = 2.0
FLUSH_ROWS = 100_000


def part_files(folder: Path, parts: str) -> list[Path]:
    """The parts of ``folder/parts``, in the order they were written."""
    directory = folder / parts
    return sorted(directory.glob("part-*.parquet")) if directory.is_dir() else []


def has_parts(folder: Path) -> bool:
    """Whether ``folder`` holds streamed parts that were never sealed."""
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


def sample_times_s(t_ns: Any, t0_ns: int) -> np.ndarray:
    """Readings' times (perf_counter_ns) as samples.parquet's ``t_s``: seconds since ``t0_ns``,
    the run's start (negative for readings before it)."""
    return (np.asarray(t_ns, dtype=np.int64) - t0_ns) / 1e9


# Ties in time keep the order of a table of every sampler's readings, sampler after sampler.
_SAMPLE_ORDER = [(key, "ascending") for key in ("t_s", SAMPLE_PART_SAMPLER, "_part", "_row")]


def _keyed_part(part: pa.Table, index: int, t0_ns: int) -> pa.Table:
    """Part ``index`` on the run's clock, with the keys that order its readings."""
    part = part.select(SAMPLE_PART_SCHEMA.names).cast(SAMPLE_PART_SCHEMA)
    rows = part.num_rows
    return (
        part.append_column("t_s", pa.array(sample_times_s(part["t_ns"].to_numpy(), t0_ns)))
        .append_column("_part", pa.array(np.full(rows, index, dtype=np.int64)))
        .append_column("_row", pa.array(np.arange(rows, dtype=np.int64)))
    )


def _ordered(keyed: pa.Table) -> pa.Table:
    return keyed.take(pc.sort_indices(keyed, sort_keys=_SAMPLE_ORDER))


def _as_samples(keyed: pa.Table) -> pa.Table:
    return keyed.select(SAMPLES_SCHEMA.names).cast(SAMPLES_SCHEMA)


def read_sample_parts(folder: Path, t0_ns: int) -> pa.Table:
    """The samples of a folder's unsealed ``samples.parts`` (a killed run's), as samples.parquet
    would hold them (module docstring); empty when there are none."""
    parts = part_files(folder, SAMPLES_PARTS)
    keyed = [_keyed_part(pq.read_table(p), n, t0_ns) for n, p in enumerate(parts)]
    return _as_samples(_ordered(pa.concat_tables(keyed))) if keyed else SAMPLES_SCHEMA.empty_table()


def _later_firsts(parts: list[Path]) -> list[int | None]:
    """For each part, the earliest t_ns of every part after it (None after the last)."""
    later: list[int | None] = [None] * len(parts)
    low: int | None = None
    for n in range(len(parts) - 1, 0, -1):
        first = pc.min(pq.read_table(parts[n], columns=["t_ns"])["t_ns"]).as_py()
        low = first if low is None else low if first is None else min(low, first)
        later[n - 1] = low
    return later


def seal_samples(folder: Path, name: str, t0_ns: int) -> Path | None:
    """``folder/name`` (samples.parquet) from the folder's ``samples.parts``, then the parts
    removed; returns its path, or None when there are no parts (no reading was taken).

    Memory holds one part and the readings not yet in their final place: a reading is written
    once it is earlier than every reading of the parts still to come (a sampler may stamp a
    reading before the last flush, as the CPU sampler does a process born between two ticks).
    """
    parts = part_files(folder, SAMPLES_PARTS)
    if not parts:
        return None
    later = _later_firsts(parts)

    def write(tmp: Path) -> None:
        pending: pa.Table | None = None
        done: list[pa.Table] = []
        with pq.ParquetWriter(tmp, SAMPLES_SCHEMA) as writer:
            for n, part in enumerate(parts):
                keyed = _keyed_part(pq.read_table(part), n, t0_ns)
                pending = _ordered(keyed if pending is None else pa.concat_tables([pending, keyed]))
                final = pending.num_rows
                if later[n] is not None:
                    times_s = pending["t_s"].to_numpy()
                    final = int(np.searchsorted(times_s, sample_times_s(later[n], t0_ns)))
                done.append(_as_samples(pending.slice(0, final)))
                pending = pending.slice(final)
                rows = sum(t.num_rows for t in done)
                if rows and (rows >= SAMPLES_ROW_GROUP or later[n] is None):
                    writer.write_table(pa.concat_tables(done))
                    done = []

    path = atomic_write(folder / name, write)
    shutil.rmtree(folder / SAMPLES_PARTS, ignore_errors=True)
    return path


class RecordStream:
    """Finished records appended to a run folder in parts (module docstring); thread-safe.

    ``flush_s`` (seconds) and ``flush_rows`` (requests plus chunks) bound what a kill can lose.
    """

    def __init__(
        self, folder: Path, flush_s: float = FLUSH_S, flush_rows: int = FLUSH_ROWS
    ) -> None:
        if not flush_s > 0 or flush_rows < 1:
            raise ValueError(f"flush_s must be > 0 and flush_rows >= 1: {flush_s}, {flush_rows}")
        self.folder = Path(folder)
        self.flush_s = flush_s
        self.flush_rows = flush_rows
        self.requests_written = 0
        self.chunks_written = 0
        self.parts_written = 0
        self._buffer: list[Any] = []
        self._rows = 0
        self._oldest: float | None = None
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._timer = threading.Thread(target=self._tick, name="record-stream", daemon=True)
        self._timer.start()

    def add(self, record: Any) -> None:
        """Take one finished RequestRecord (and its chunks); flush when a bound is reached."""
        with self._lock:
            if self._closed.is_set():
                raise RuntimeError(f"{self.folder}: the record stream is closed")
            self._buffer.append(record)
            self._rows += 1 + len(record.chunks)
            if self._oldest is None:
                self._oldest = time.monotonic()
            if self._rows >= self.flush_rows:
                self._flush_locked()

    def extend(self, records: Iterable[Any]) -> None:
        for record in records:
            self.add(record)

    def flush(self) -> None:
        """Write what is buffered now, as one part of each table."""
        with self._lock:
            self._flush_locked()

    def _tick(self) -> None:
        while not self._closed.wait(self.flush_s / 4):
            with self._lock:
                due = self._oldest is not None and time.monotonic() - self._oldest >= self.flush_s
                if due and not self._closed.is_set():
                    self._flush_locked()

    def _flush_locked(self) -> None:
        if not self._buffer:
            return
        records, self._buffer, self._rows, self._oldest = self._buffer, [], 0, None
        name = f"part-{self.parts_written:06d}.parquet"
        tokens = tokens_table(records)
        # Tokens first: a kill between the two leaves chunks of unlisted requests, which no
        # figure counts, rather than requests whose chunks are missing.
        sync_write(self.folder / TOKENS_PARTS / name, tokens)
        sync_write(self.folder / REQUESTS_PARTS / name, requests_table(records))
        self.parts_written += 1
        self.requests_written += len(records)
        self.chunks_written += tokens.num_rows
        for record in records:
            record.chunks = []  # on disk now; the caller's record need not hold them

    def close(self) -> None:
        """Flush the rest and stop the timer; the folder's writer then seals the parts
        (results.folder.run_folder.RunFolder.seal_records)."""
        with self._lock:
            if self._closed.is_set():
                return
            self._flush_locked()
            self._closed.set()
        with contextlib.suppress(RuntimeError):
            self._timer.join(timeout=5.0)
