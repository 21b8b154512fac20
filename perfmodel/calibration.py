"""The saved calibration of this machine: `bench calibrate`'s measured roofs, as JSON.

A CPU has no datasheet roof worth plotting, so a CPU run's roofline uses these measurements (and a
GPU's can be compared with its datasheet). bench.experiments.calibrate measures them; this module
only names, writes and reads the file (version 1), so the analytic model never imports torch.

Saved at perfmodel.cache.calibration_path() (``$LLM_PERF_LAB_CACHE/calibration.json``) or a path
given; perfmodel.hardware.spec_from_calibration turns it into roofs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from perfmodel.cache import calibration_path

__all__ = ["load", "save"]


def save(calibration: dict[str, Any], path: Path | None = None) -> Path:
    """Write ``calibration`` as JSON to ``path`` (default: perfmodel.cache.calibration_path())."""
    path = path or calibration_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(calibration, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def load(path: Path | None = None) -> dict[str, Any] | None:
    """The saved calibration, or None when there is none (or it cannot be read)."""
    path = path or calibration_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("version") == 1 else None
