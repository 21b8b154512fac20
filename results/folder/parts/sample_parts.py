"""The probes' samples, streamed in parts by the process that takes them (probes.sample_stream:
``samples.parts``, every ``flush_s`` seconds, each part the readings taken since the last, on
the probes' clock with the index of the sampler that took each:
results.folder.tables.SAMPLE_PART_SCHEMA), made into samples.parquet (:func:`seal_samples`) or
read unsealed from a killed run's folder (:func:`read_sample_parts`). Both put the readings on
the run's clock (:func:`sample_times_s`) and in the order one table of every sampler's readings,
sorted stably by time, has (by time, then sampler, then the order each sampler took them), so
the table is the one a run that held its samples to the end would write.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from perfmodel.files import atomic_write
from results.folder.parts.writer import SAMPLES_PARTS, part_files
from results.folder.table_columns import SAMPLE_PART_SAMPLER
from results.folder.tables import SAMPLE_PART_SCHEMA, SAMPLES_SCHEMA

__all__ = ["read_sample_parts", "sample_times_s", "seal_samples"]

# Readings a row group of a sealed samples.parquet holds (a part holds one flush interval's).
SAMPLES_ROW_GROUP = 65_536


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
