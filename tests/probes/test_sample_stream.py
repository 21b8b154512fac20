"""The probes' readings streamed into the run folder in parts, and sealed into samples.parquet.

The sealed table must be the one a run that held every reading to its end wrote: the old
writer (every sampler's readings in one table, put on the run's clock and sorted stably by
time, then RunFolder.write_samples) is kept here as the reference, and given the same readings.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from probes.probe_process import ProbeProcess
from probes.probe_spec import ProbeSpec
from probes.sample_stream import SampleStream
from probes.sampler import Emit, Sampler, SamplerThread
from probes.session import ProbeSession
from results.folder.parts import sample_parts
from results.folder.parts.sample_parts import read_sample_parts, seal_samples
from results.folder.parts.writer import SAMPLES_PARTS, part_files
from results.folder.run_folder import SAMPLES_PARQUET, RunFolder
from results.folder.table_columns import SAMPLE_COLUMNS
from results.folder.tables import SAMPLES_SCHEMA

T0_NS = 5_000_000_000_000


class Named(Sampler):
    """A sampler whose readings the test appends itself; ``tick`` ones when it runs."""

    def __init__(self, source: str, interval_s: float = 1.0) -> None:
        self.source = source
        super().__init__(interval_s)

    def sample(self, t_ns: int, emit: Emit) -> None:
        emit("tick", 1.0, {"k": self.source})


def held_to_the_end(columns: dict[str, list], t0_ns: int, path: Path) -> None:
    """samples.parquet as written before the readings were streamed (the reference)."""
    frame = pd.DataFrame(
        {
            "t_s": (np.asarray(columns["t_ns"], dtype=np.int64) - t0_ns) / 1e9,
            "source": pd.Series(columns["source"], dtype=object),
            "name": pd.Series(columns["name"], dtype=object),
            "value": np.asarray(columns["value"], dtype=np.float64),
            "labels": pd.Series(columns["labels"], dtype=object),
        }
    )
    frame = frame.sort_values("t_s", kind="mergesort").reset_index(drop=True)
    RunFolder(path).write_samples(frame)


def test_sealed_samples_are_the_table_a_run_holding_them_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small row groups, so that the seal writes several.
    monkeypatch.setattr(sample_parts, "SAMPLES_ROW_GROUP", 40)
    rng = random.Random(7)
    threads = [SamplerThread(Named(source)) for source in ("nvml", "gpm", "cpu", "engine")]
    stream = SampleStream(threads, tmp_path / SAMPLES_PARTS, flush_s=60.0)
    held: list[dict[str, list]] = [{name: [] for name in SAMPLE_COLUMNS} for _ in threads]
    for flush in range(12):
        base = T0_NS + (flush - 2) * 2_000_000_000  # the first readings precede the run's start
        for index, thread in enumerate(threads):
            for k in range(rng.randint(0, 9)):
                t_ns = base + rng.choice([0, 250_000_000, rng.randint(0, 1_999_999_999)])
                if rng.random() < 0.1:  # stamped before the last flush (a process born earlier)
                    t_ns -= rng.randint(1, 3) * 2_000_000_000
                reading = (t_ns, thread.sampler.source, f"m{k % 3}", rng.random(),
                           f'{{"gpu":"{k % 2}"}}' if k % 4 else "")  # fmt: skip
                thread.buffer.append(*reading[:4], {"gpu": str(k % 2)} if k % 4 else None)
                for name, value in zip(SAMPLE_COLUMNS, reading, strict=True):
                    held[index][name].append(value)
        stream.flush()
        # Only what a flush has not written is held: here, nothing.
        assert all(len(t.buffer) == 0 for t in threads)
    stream.close()
    columns = {name: [v for h in held for v in h[name]] for name in SAMPLE_COLUMNS}
    assert stream.samples_written == len(columns["t_ns"]) > 100
    assert len(part_files(tmp_path, SAMPLES_PARTS)) == stream.parts_written >= 10

    (tmp_path / "old").mkdir()
    held_to_the_end(columns, T0_NS, tmp_path / "old")
    expected = pq.read_table(tmp_path / "old" / SAMPLES_PARQUET)
    unsealed = read_sample_parts(tmp_path, T0_NS)
    assert seal_samples(tmp_path, SAMPLES_PARQUET, T0_NS) == tmp_path / SAMPLES_PARQUET
    sealed = pq.read_table(tmp_path / SAMPLES_PARQUET)
    assert sealed.schema.equals(SAMPLES_SCHEMA) and sealed.schema.equals(expected.schema)
    assert sealed.equals(expected) and unsealed.equals(expected)
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / SAMPLES_PARQUET),
        pd.read_parquet(tmp_path / "old" / SAMPLES_PARQUET),
    )
    assert pq.ParquetFile(tmp_path / SAMPLES_PARQUET).num_row_groups > 1
    assert not (tmp_path / SAMPLES_PARTS).exists()


def test_no_parts_seal_nothing(tmp_path: Path) -> None:
    assert seal_samples(tmp_path, SAMPLES_PARQUET, T0_NS) is None
    assert not (tmp_path / SAMPLES_PARQUET).exists()
    assert read_sample_parts(tmp_path, T0_NS).equals(SAMPLES_SCHEMA.empty_table())


def test_an_in_process_session_streams_and_holds_no_reading(tmp_path: Path) -> None:
    session = ProbeSession([Named("a", 0.01), Named("b", 0.01)], tmp_path / SAMPLES_PARTS, 0.05)
    assert session.start() == []
    deadline = time.monotonic() + 30.0
    while len(part_files(tmp_path, SAMPLES_PARTS)) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    result = session.stop()
    assert result.columns["t_ns"] == [] and result.stream is not None
    on_disk = sum(pq.read_metadata(p).num_rows for p in part_files(tmp_path, SAMPLES_PARTS))
    assert result.num_samples == on_disk == sum(r["samples"] for r in result.reports) > 2
    assert result.stream["parts"] >= 2 and result.stream["errors"] == 0
    assert result.to_json()["samples"] == on_disk and result.messages() == []


def test_the_probe_process_streams_its_readings_to_the_folder(tmp_path: Path) -> None:
    parts = tmp_path / SAMPLES_PARTS
    spec = ProbeSpec(nvml=False, processes={"client": os.getpid()}, cpu_interval_s=0.05)
    probes = ProbeProcess(spec, parts=parts, flush_s=0.2)
    assert probes.start() == []
    deadline = time.monotonic() + 60.0
    while len(part_files(tmp_path, SAMPLES_PARTS)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(part_files(tmp_path, SAMPLES_PARTS)) >= 2  # written while the probes run
    result = probes.stop()
    (report,) = result.reports
    assert report["status"] == "ok" and result.columns["t_ns"] == []
    assert result.num_samples == report["samples"] == result.stream["samples"] > 0
    assert seal_samples(tmp_path, SAMPLES_PARQUET, T0_NS) is not None
    table = pq.read_table(tmp_path / SAMPLES_PARQUET)
    assert table.num_rows == result.num_samples and set(table["source"].to_pylist()) == {"cpu"}
    times = table["t_s"].to_numpy()
    assert (np.diff(times) >= 0).all()
    assert len(set(table["name"].to_pylist())) > 3
