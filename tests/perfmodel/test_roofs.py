"""perfmodel.roofs: the one roof lookup (hardware table by NVML name, this CPU's calibration)
and the roofs' dict in run.json."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel.hardware import get_gpu
from perfmodel.roofs import Roofs, find_roofs, roofs_of, table_roofs
from tests.support.calibration import save_calibration

RUN_JSON_KEYS = {"name", "source", "compute_dtype", "flops_per_s", "bytes_per_s",
                 "ridge_flop_per_byte"}  # fmt: skip


def test_roofs_round_trip_through_run_jsons_keys() -> None:
    roofs = table_roofs(get_gpu("a100-80gb"), "bfloat16")
    data = roofs.to_dict()
    assert set(data) == RUN_JSON_KEYS
    assert data["compute_dtype"] == "bf16" and data["flops_per_s"] == 312e12
    assert data["ridge_flop_per_byte"] == pytest.approx(312e12 / 2.039e12)
    assert data["source"].startswith("hardware table: ")
    assert Roofs.from_dict(data) == roofs
    assert roofs.label == "NVIDIA A100 80GB SXM bf16"


@pytest.mark.parametrize(
    "data",
    [None, [], {}, {"flops_per_s": 1e12}, {"flops_per_s": 0, "bytes_per_s": 1e9},
     {"flops_per_s": True, "bytes_per_s": 1e9}, {"flops_per_s": float("nan"), "bytes_per_s": 1},
     {"flops_per_s": "1e12", "bytes_per_s": 1e9}],
)  # fmt: skip
def test_recorded_roofs_without_both_peaks_are_none(data: object) -> None:
    assert Roofs.from_dict(data) is None


def test_roofs_refuse_non_positive_peaks_naming_them() -> None:
    with pytest.raises(ValueError, match="bytes_per_s=0"):
        Roofs("x", "test", "fp32", 1e9, 0.0)


def test_a_dtype_without_a_peak_is_named() -> None:
    with pytest.raises(ValueError, match="no fp8 peak"):
        roofs_of(get_gpu("a100-80gb"), "fp8", "test")
    with pytest.raises(ValueError, match="unknown compute dtype 'int3'"):
        table_roofs(get_gpu("h100-sxm"), "int3")


def test_gpu_roofs_by_nvml_name_and_why_there_are_none() -> None:
    roofs, reason = find_roofs("cuda:1", "fp8", ["x", "NVIDIA H100 80GB HBM3"], "cpu")
    assert reason is None and roofs == table_roofs(get_gpu("h100-sxm"), "fp8")
    assert find_roofs("cuda:2", "bf16", ["NVIDIA H100 80GB HBM3"], "cpu") == (
        None,
        "NVML lists no GPU 2; no roofs",
    )
    roofs, reason = find_roofs("cuda", "bf16", ["NVIDIA H800"], "cpu")
    assert roofs is None and "not in perfmodel.hardware's table" in reason
    roofs, reason = find_roofs("cuda", "bf16", ["NVIDIA H100 NVL"], "cpu")
    assert reason is None and roofs == table_roofs(get_gpu("h100-nvl"), "bf16")
    roofs, reason = find_roofs("cuda", "fp8", ["NVIDIA A100-SXM4-80GB"], "cpu")
    assert roofs is None and "no fp8 peak" in reason


def test_cpu_roofs_are_this_machines_calibration_of_the_same_cpu(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    roofs, reason = find_roofs("cpu", "fp32", [], "Fake CPU", path)
    assert roofs is None and "run `bench calibrate`" in reason
    save_calibration(path, "Fake CPU", fp32_flops_per_s=40e9, triad_bytes_per_s=8e9)
    roofs, reason = find_roofs("cpu", "float32", [], "Fake CPU", path)
    assert reason is None and roofs is not None
    assert (roofs.name, roofs.flops_per_s, roofs.bytes_per_s) == ("Fake CPU", 40e9, 8e9)
    assert roofs.ridge_flop_per_byte == 5.0 and roofs.source.startswith("bench calibrate (2026")
    roofs, reason = find_roofs("cpu", "fp32", [], "Other CPU", path)
    assert roofs is None and reason == "the calibration was measured on 'Fake CPU', not 'Other CPU'"
    roofs, reason = find_roofs("cpu", "fp16", [], "Fake CPU", path)
    assert roofs is None and "no fp16 peak" in reason


def test_roofs_of_a_quick_calibration_say_so(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    save_calibration(path, "Fake CPU", mode="quick")
    roofs, reason = find_roofs("cpu", "fp32", [], "Fake CPU", path)
    assert reason is None and roofs is not None
    assert roofs.source.startswith("quick calibration (2026")
    assert (
        "may read low" in roofs.source and "`bench calibrate` measures them fully" in roofs.source
    )
