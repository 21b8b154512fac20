"""A made-up CPU calibration, so that tests do not depend on this machine's measured figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

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


def use_fake_calibration(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Make ``folder``/cache the lab's cache (tests.support.cache) for the rest of the test and
    write FAKE_CALIBRATION as its calibration (so the sim calibrations sit beside it too);
    returns the file's path."""
    path = isolated_cache(monkeypatch, folder / "cache") / "calibration.json"
    path.write_text(json.dumps(FAKE_CALIBRATION))
    return path
