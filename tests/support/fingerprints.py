"""run.json "fingerprint" sections for tests (bench.run.endpoint.run_fingerprint's shape): a quiet
H100
node, and the same node with one thing wrong."""

from __future__ import annotations

import copy
from typing import Any


def gpu(index: int = 0, thermal_ns: int = 0, ecc: int | None = 0) -> dict[str, Any]:
    return {
        "index": index, "uuid": f"GPU-{index}", "name": "NVIDIA H100 80GB HBM3",
        "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980, "mem_clock_mhz": 2619,
        "mem_clock_max_mhz": 2619, "power_limit_w": 700.0, "temperature_c": 60,
        "ecc_uncorrected_volatile": ecc,
        "violation_ns": {"power": 0, "thermal": thermal_ns, "sync_boost": 0, "board_limit": 0,
                         "reliability": 0},
    }  # fmt: skip


def snapshot(
    governor: str = "performance", driver: str = "acpi-cpufreq",
    preference: str | None = None, gpus: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:  # fmt: skip
    return {
        "cpu": {
            "driver": driver, "governors": {governor: 2},
            "energy_performance_preferences": {preference: 2} if preference else None,
            "mhz": None, "load_average_1m": 0.5,
        },
        "gpu": {
            "available": True, "driver_version": "570.86.15", "cuda_driver_version": "12.8",
            "gpus": gpus if gpus is not None else [gpu()], "unavailable_readings": [],
        },
    }  # fmt: skip


def fingerprint(
    start: dict[str, Any] | None = None, end: dict[str, Any] | None = None,
    span_s: float = 60.0, xids: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:  # fmt: skip
    start = start or snapshot()
    return {
        "start": start, "end": end or copy.deepcopy(start), "span_s": span_s,
        "xid": {"watched": [0], "events": xids or [], "reason": None},
        "engine": {"version": "0.32.0", "version_source": "/version", "version_reason": None,
                   "models": [{"id": "tiny"}]},
    }  # fmt: skip


def throttled(seconds: float, span_s: float = 60.0) -> dict[str, Any]:
    """A run during which GPU 0 was thermally throttled for ``seconds``."""
    return fingerprint(end=snapshot(gpus=[gpu(thermal_ns=int(seconds * 1e9))]), span_s=span_s)
