"""The saved calibration of this machine: `bench calibrate`'s measured roofs, as JSON.

A CPU has no datasheet roof worth plotting, so a CPU run's roofline uses these measurements (and a
GPU's can be compared with its datasheet). bench.experiments.calibrate measures them; this module
only names, writes and reads the file (version 1), so the analytic model never imports torch.

Saved at perfmodel.cache.calibration_path() (``$LLM_PERF_LAB_CACHE/calibration.json``) or a path
given; perfmodel.hardware.spec_from_calibration turns it into roofs.

A calibration is ``"mode": "full"`` (`bench calibrate`, :data:`FULL_BUDGET_S` per figure) or
``"quick"`` (`bench calibrate --quick`, :data:`QUICK_BUDGET_S` per figure: what `bench run` measures
by itself the first time a CPU run needs roofs). Each figure is the best of the timings made within
its budget, so fewer timings tend to read lower: a quick roof reads low, and MFU and MBU against
it high (on a 2-core machine by up to about 12% against a full calibration).
A file without ``mode`` was written before quick calibrations existed: full.
"""

from __future__ import annotations

import json
from pathlib import Path

from perfmodel.cache import calibration_path
from perfmodel.files import JSONObject, write_json

__all__ = [
    "FULL_BUDGET_S",
    "QUICK_BUDGET_S",
    "for_cpu",
    "is_quick",
    "load",
    "save",
    "source_of",
]

FULL_BUDGET_S = 0.5
QUICK_BUDGET_S = 0.15


def save(calibration: JSONObject, path: Path | None = None) -> Path:
    """Write ``calibration`` as JSON to ``path`` (default: perfmodel.cache.calibration_path())."""
    path = path or calibration_path()
    return write_json(path, calibration)


def load(path: Path | None = None) -> JSONObject | None:
    """The saved calibration, or None when there is none (or it cannot be read)."""
    path = path or calibration_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("version") == 1 else None


def is_quick(calibration: JSONObject) -> bool:
    """Whether ``calibration`` is a quick one (module docstring)."""
    return calibration.get("mode") == "quick"


def source_of(calibration: JSONObject) -> str:
    """Where roofs read from ``calibration`` come from, honest about a quick one's precision."""
    created = calibration.get("created_utc")
    if not is_quick(calibration):
        return f"bench calibrate ({created})"
    return (
        f"quick calibration ({created}, {calibration.get('budget_s')} s per figure: the roofs may "
        "read low and MFU/MBU high; `bench calibrate` measures them fully)"
    )


def for_cpu(cpu_name: str, path: Path | None = None) -> tuple[JSONObject | None, str | None]:
    """The saved calibration when it was measured on the CPU named ``cpu_name``: (calibration,
    None), or (None, a sentence saying why there is none and what would give one)."""
    saved = load(path)
    if saved is None:
        return None, "no calibration of this CPU: run `bench calibrate` for a CPU run's roofs"
    measured_on = (saved.get("host") or {}).get("cpu")
    if measured_on and measured_on != cpu_name:
        return None, f"the calibration was measured on {measured_on!r}, not {cpu_name!r}"
    return saved, None
