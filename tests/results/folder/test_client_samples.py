"""The client table's rows as the load generator collects them: typed, merged and written."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow.parquet as pq

from results.figures.client_check import read_client_table, write_client_table
from results.folder.client_samples import CLIENT_COLUMNS, ClientSamples


def test_rows_merge_across_workers_and_write_the_same_table(tmp_path: Path) -> None:
    first, second = ClientSamples(), ClientSamples()
    first.add(0.5, 0, "loop_lag_s", 0.001)
    first.add(0.75, 0, "cpu_s", 0.25)
    # Another worker met its series in another order: its codes differ, its names must not.
    second.add(0.6, 1, "cpu_s", 0.5)
    second.add(0.7, 1, "schedule_lag_s", 0.002)
    second.add(0.8, 1, "loop_lag_s", 0.003)
    first.extend(pickle.loads(pickle.dumps(second)))  # as a worker process sends them
    assert len(first) == 5
    assert first.name == ["loop_lag_s", "cpu_s", "cpu_s", "schedule_lag_s", "loop_lag_s"]
    assert list(first.worker) == [0, 0, 1, 1, 1]
    assert first.columns()["value"] == [0.001, 0.25, 0.5, 0.002, 0.003]
    assert list(first.columns()) == list(CLIENT_COLUMNS)
    write_client_table(tmp_path, first)
    frame = read_client_table(tmp_path)
    assert frame is not None and frame["name"].tolist() == first.name
    assert frame["t_s"].tolist() == [0.5, 0.75, 0.6, 0.7, 0.8]
    assert pq.read_schema(tmp_path / "client.parquet").names == list(CLIENT_COLUMNS)


def test_rows_are_held_compactly() -> None:
    samples = ClientSamples()
    for i in range(10_000):
        samples.add(i * 0.01, 0, "loop_lag_s", 1e-4 * i)
    held = sum(a.itemsize * len(a) for a in (samples.t_s, samples.worker, samples.value))
    assert held + len(samples) == 21 * 10_000  # a one-byte code per row for the name
