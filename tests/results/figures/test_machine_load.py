"""machine_load from CPU probe readings, through summarize_run: a run is marked busy when other
processes used BUSY_OTHER_CPU_SHARE of the machine's CPU or more, and says how much."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from results.figures.machine_load import BUSY_OTHER_CPU_SHARE, busy_lines, process_labels
from tests.support.cpu_load import LOGICAL_CPUS
from tests.support.gate_fakes import write_loaded_run


def load_of(tmp_path: Path, other_share: float) -> dict:
    folder = write_loaded_run(tmp_path / f"share-{other_share}", other_share)
    return json.loads((folder / "summary.json").read_text())


def test_a_run_on_a_loaded_machine_is_marked_busy_with_the_share(tmp_path: Path) -> None:
    summary = load_of(tmp_path, 0.40)
    load = summary["machine_load"]
    assert load["available"] and load["busy"] and load["threshold"] == BUSY_OTHER_CPU_SHARE
    # The probe ticks every second on 2 CPUs; the run's processes use 1.2 CPU s per second.
    span = load["span_s"]
    assert load["capacity_cpu_s"] == pytest.approx(LOGICAL_CPUS * span)
    assert load["run_cpu_s"] == pytest.approx(1.2 * span)
    assert load["other_cpu_share"] == pytest.approx(0.40)
    assert load["message"].startswith("other processes used 40% of the CPU during this run")
    assert "busy machine" in load["message"]
    assert busy_lines(summary) == [f"busy machine: {load['message']}"]


def test_a_quiet_machine_is_not_marked(tmp_path: Path) -> None:
    summary = load_of(tmp_path, 0.10)
    load = summary["machine_load"]
    assert load["available"] and not load["busy"]
    assert load["other_cpu_share"] == pytest.approx(0.10)
    assert load["message"] == "other processes used 10% of the CPU during this run"
    assert busy_lines(summary) == []


def test_process_labels_read_the_parquet_json_and_the_dashboards_text_alike() -> None:
    parquet = '{"group": "engine", "pid": "12", "process": "engine-core"}'
    text = "group=engine,pid=12,process=engine-core"
    assert process_labels(parquet) == process_labels(text)
    assert process_labels(text) == {"group": "engine", "pid": "12", "process": "engine-core"}
    # A folder from before the probe followed children: the role was the process label.
    assert process_labels("pid=7,process=client")["group"] == "client"
    assert process_labels("")["group"] == "unknown"
