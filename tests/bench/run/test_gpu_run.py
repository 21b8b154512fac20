"""The GPU probe and `bench run` on a GPU (`pytest -m gpu`; skipped, saying why, without one):
NVML and GPM readings are sane under a known load; the run folder of a probed run holds GPU
series, energy per token, MFU and MBU; under --nsys (where nsys is installed) the report lands
in it."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from bench.run.orchestrate import RunOptions, run_benchmark
from bench.scenario.scenario import load_scenario
from benchmarks.gpu_checks.device_checks import check_nvml
from results.folder.run_folder import load_run

pytestmark = pytest.mark.gpu

SCENARIO = """
name = "gpu-run"
users = 4
num_requests = 16
ignore_eos = true
seed = 1
ramp_up_s = 1.5

[input_len]
kind = "uniform"
low = 32
high = 64

[output_len]
kind = "uniform"
low = 16
high = 32

[engine]
device = "cuda"
dtype = "bfloat16"
"""


def test_readings_during_a_matmul_loop_are_sane() -> None:
    # Energy rises, power stays within the part's limit, the SMs show activity; tensor and
    # DRAM activity too where GPM runs (Hopper or newer, with the permission to open it).
    row = check_nvml(None, "nvml")
    assert row.values["energy rising"] and row.values["power within limit"], row
    assert row.values["SM active"], row
    if "GPM off" not in row.detail:
        assert row.values["tensor active"] and row.values["DRAM bandwidth"], row


def _run(tmp_path: Path, **opts: object) -> Path:
    scenario = tmp_path / "gpu-run.toml"
    scenario.write_text(SCENARIO)
    options = RunOptions(load_scenario(scenario), None, "reference", None, "tiny",
                         tmp_path / "runs", live=False, **opts)  # fmt: skip
    folder, _ = run_benchmark(options, Console(file=io.StringIO(), width=200))
    return folder


def test_a_probed_run_has_gpu_series_energy_mfu_and_mbu(tmp_path: Path) -> None:
    folder = _run(tmp_path)
    samples = load_run(folder).samples
    names = set(samples.loc[samples["source"] == "nvml", "name"])
    assert {"gpu_util_pct", "power_w", "energy_j", "memory_used_bytes"} <= names
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["probes"]["energy"]["joules_per_output_token"] > 0
    attribution = summary["attribution"]
    assert 0 < attribution["mfu"] < 1 and 0 < attribution["mbu"] < 1


def test_nsys_writes_its_report_into_the_run_folder(tmp_path: Path) -> None:
    if shutil.which("nsys") is None:
        pytest.skip("nsys is not on PATH (Nsight Systems, from the CUDA toolkit)")
    folder = _run(tmp_path, nsys=True, probes=False)
    assert (folder / "engine.nsys-rep").stat().st_size > 0
