"""Saved `bench calibrate` results with chosen figures, written by perfmodel.calibration.save, for
tests of what reads them (roofs of a CPU run, the simulated CPU) without timing a measurement."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from perfmodel import cache, calibration
from tests.support.cache import isolated_cache

# The shape `bench calibrate` writes; fixed figures (FLOP/s and bytes/s) of a CPU that is no one's.
FAKE_CALIBRATION: dict[str, Any] = {
    "version": 1,
    "created_utc": "2026-01-01T00:00:00+00:00",
    "host": {"cpu": "Test CPU"},
    "num_threads": 1,
    "cpu": {"matmul_flops_per_s": {"fp32": 50e9, "bf16": 100e9}, "triad_bytes_per_s": 10e9},
    "gpus": [],
}


def save_calibration(
    path: Path,
    cpu: str,
    fp32_flops_per_s: float = 40e9,
    triad_bytes_per_s: float = 8e9,
    mode: str | None = None,
) -> dict[str, Any]:
    """Save a calibration of the CPU named ``cpu`` at ``path``, in calibrate()'s shape, and
    return it; ``mode`` ("full", "quick") is recorded when given (older files have none)."""
    measured = {
        "version": FAKE_CALIBRATION["version"],
        "created_utc": FAKE_CALIBRATION["created_utc"],
        "host": {"cpu": cpu, "cpu_count_logical": 2},
        "cpu": {
            "matmul_flops_per_s": {"fp32": fp32_flops_per_s, "bf16": fp32_flops_per_s / 2},
            "triad_bytes_per_s": triad_bytes_per_s,
        },
        "gpus": [],
    }
    if mode is not None:
        measured.update(mode=mode, budget_s=calibration.QUICK_BUDGET_S)
    calibration.save(measured, path)
    return measured


def use_fake_calibration(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Make ``folder``/cache the lab's cache (tests.support.cache) for the rest of the test and
    save FAKE_CALIBRATION as its calibration (so the sim calibrations sit beside it too);
    returns the file's path."""
    isolated_cache(monkeypatch, folder / "cache")
    return calibration.save(FAKE_CALIBRATION, cache.calibration_path())
