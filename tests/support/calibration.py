"""A made-up CPU calibration, so that tests do not depend on this machine's measured figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from perfmodel.calibration import CALIBRATION_ENV

# The shape `bench calibrate` writes; fixed figures (FLOP/s and bytes/s) of a CPU that is no one's.
FAKE_CALIBRATION: dict[str, Any] = {
    "version": 1,
    "created_utc": "2026-01-01T00:00:00+00:00",
    "host": {"cpu": "Test CPU"},
    "num_threads": 1,
    "cpu": {"matmul_flops_per_s": {"fp32": 50e9, "bf16": 100e9}, "triad_bytes_per_s": 10e9},
    "gpus": [],
}


def use_fake_calibration(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Write FAKE_CALIBRATION into ``folder`` and point `bench calibrate`'s file (and so the sim
    calibration's folder) at it for the rest of the test; returns the file's path."""
    path = folder / "calibration.json"
    path.write_text(json.dumps(FAKE_CALIBRATION))
    monkeypatch.setenv(CALIBRATION_ENV, str(path))
    return path
