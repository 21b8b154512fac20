"""A saved `bench calibrate` result with chosen figures, written by perfmodel.calibration.save,
for tests of what reads it (roofs of a CPU run) without timing a real measurement."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfmodel import calibration


def save_calibration(
    path: Path, cpu: str, fp32_flops_per_s: float = 40e9, triad_bytes_per_s: float = 8e9
) -> dict[str, Any]:
    """Save a calibration of the CPU named ``cpu`` at ``path``, in calibrate()'s shape, and
    return it."""
    measured = {
        "version": 1,
        "created_utc": "2026-01-01T00:00:00+00:00",
        "host": {"cpu": cpu, "cpu_count_logical": 2},
        "cpu": {
            "matmul_flops_per_s": {"fp32": fp32_flops_per_s, "bf16": fp32_flops_per_s / 2},
            "triad_bytes_per_s": triad_bytes_per_s,
        },
        "gpus": [],
    }
    calibration.save(measured, path)
    return measured
