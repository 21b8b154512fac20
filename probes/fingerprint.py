"""A snapshot of what makes a machine's figures comparable: CPU frequency policy and GPU state.

Taken before and after a run (bench.run.endpoint.run_fingerprint) and stored in run.json's
"fingerprint"; results.validity.run_validity compares the two snapshots and names what would make
the
run's figures not the hardware's best: a powersave governor, clocks held below their maximum,
thermal or power-brake throttling time accumulated during the run, new uncorrected ECC errors.

Every reading is optional: a VM has no cpufreq, a consumer GPU no ECC, a container may not be
allowed some NVML calls. A reading that cannot be taken is None, and ``unavailable`` says why,
so a snapshot never fails a run.

NVML readings (nvidia-ml-py, ``pynvml``; the module is passed in so tests can give a fake):
- clocks: ``nvmlDeviceGetClockInfo`` / ``nvmlDeviceGetMaxClockInfo`` for SM and memory (MHz);
- throttle time: ``nvmlDeviceGetViolationStatus`` per policy, a cumulative count of
  nanoseconds the GPU ran below its clocks for that reason (the run's share is the increase
  between the two snapshots);
- ``nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)``: uncorrected errors since the driver
  loaded;
- the driver (``nvmlSystemGetDriverVersion``) and the CUDA version it supports
  (``nvmlSystemGetCudaDriverVersion``, 12040 -> "12.4").
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psutil

from perfmodel.files import JSONObject

_CPUFREQ = Path("/sys/devices/system/cpu")
# NVML's violation policies worth naming, by the key they are stored under.
VIOLATION_POLICIES = {
    "power": "NVML_PERF_POLICY_POWER",
    "thermal": "NVML_PERF_POLICY_THERMAL",
    "sync_boost": "NVML_PERF_POLICY_SYNC_BOOST",
    "board_limit": "NVML_PERF_POLICY_BOARD_LIMIT",
    "reliability": "NVML_PERF_POLICY_RELIABILITY",
}


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cpu_fingerprint(root: Path = _CPUFREQ) -> JSONObject:
    """The CPU's frequency policy now: the cpufreq driver, each governor and
    energy-performance preference in use (with how many CPUs use it), current/min/max MHz, and
    the 1-minute load average."""
    governors: dict[str, int] = {}
    preferences: dict[str, int] = {}
    for cpu in sorted(root.glob("cpu[0-9]*")):
        governor = _read(cpu / "cpufreq" / "scaling_governor")
        if governor is not None:
            governors[governor] = governors.get(governor, 0) + 1
        preference = _read(cpu / "cpufreq" / "energy_performance_preference")
        if preference is not None:
            preferences[preference] = preferences.get(preference, 0) + 1
    try:
        freq = psutil.cpu_freq()
    except (OSError, NotImplementedError, RuntimeError):
        freq = None
    out: JSONObject = {
        "driver": _read(root / "cpu0" / "cpufreq" / "scaling_driver"),
        "governors": governors or None,
        "energy_performance_preferences": preferences or None,
        "mhz": (
            {"current": freq.current, "min": freq.min or None, "max": freq.max or None}
            if freq
            else None
        ),
        "load_average_1m": os.getloadavg()[0],
    }
    if not governors:
        out["unavailable"] = (
            f"no {root}/cpu*/cpufreq/scaling_governor: the frequency policy is the host's or "
            "the hypervisor's (a VM or container), not visible here"
        )
    return out


def _safe(nvml: Any, call: Callable[[], Any], missing: list[str], what: str) -> Any:
    """``call()``, or None with ``what`` noted when NVML refuses it (not supported, no
    permission, an older driver without the function)."""
    try:
        return call()
    except (nvml.NVMLError, AttributeError) as exc:
        missing.append(f"{what}: {exc}")
        return None


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def cuda_version_text(version: int | None) -> str | None:
    """NVML's CUDA driver version (e.g. 12040) as "12.4"."""
    if version is None:
        return None
    return f"{version // 1000}.{(version % 1000) // 10}"


def _gpu(nvml: Any, index: int, missing: list[str]) -> JSONObject:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)

    def get(what: str, fn: str, *args: Any) -> Any:
        return _safe(nvml, lambda: getattr(nvml, fn)(handle, *args), missing, f"GPU {index} {what}")

    sm, mem = nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM
    violations = {}
    for key, policy in VIOLATION_POLICIES.items():
        status = get(f"violation {key}", "nvmlDeviceGetViolationStatus", getattr(nvml, policy))
        violations[key] = None if status is None else int(status.violationTime)
    power_mw = get("power limit", "nvmlDeviceGetEnforcedPowerLimit")
    ecc = (nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC)
    return {
        "index": index,
        "uuid": _text(get("uuid", "nvmlDeviceGetUUID")),
        "name": _text(get("name", "nvmlDeviceGetName")),
        "sm_clock_mhz": get("SM clock", "nvmlDeviceGetClockInfo", sm),
        "sm_clock_max_mhz": get("SM max clock", "nvmlDeviceGetMaxClockInfo", sm),
        "mem_clock_mhz": get("memory clock", "nvmlDeviceGetClockInfo", mem),
        "mem_clock_max_mhz": get("memory max clock", "nvmlDeviceGetMaxClockInfo", mem),
        "power_limit_w": power_mw / 1000 if power_mw is not None else None,
        "temperature_c": get("temperature", "nvmlDeviceGetTemperature", nvml.NVML_TEMPERATURE_GPU),
        "ecc_uncorrected_volatile": get("ECC", "nvmlDeviceGetTotalEccErrors", *ecc),
        "violation_ns": violations,
    }


def gpu_fingerprint(nvml: Any | None = None, indices: Sequence[int] | None = None) -> JSONObject:
    """The GPUs' state now (module docstring): ``indices`` are NVML indices (None: every GPU);
    ``nvml`` the pynvml module (None: imported). Without NVML, ``available`` is False and
    ``reason`` says why."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return {"available": False, "reason": "nvidia-ml-py is not installed"}
    try:
        nvml.nvmlInit()
    except Exception as exc:  # no library, no driver: no GPU to describe
        return {"available": False, "reason": f"NVML did not start: {exc}"}
    try:
        missing: list[str] = []
        count = nvml.nvmlDeviceGetCount()
        chosen = list(range(count)) if indices is None else [i for i in indices if i < count]
        cuda = _safe(nvml, nvml.nvmlSystemGetCudaDriverVersion, missing, "CUDA driver version")
        return {
            "available": True,
            "driver_version": _text(
                _safe(nvml, nvml.nvmlSystemGetDriverVersion, missing, "driver version")
            ),
            "cuda_driver_version": cuda_version_text(cuda),
            "gpus": [_gpu(nvml, i, missing) for i in chosen],
            "unavailable_readings": missing,
        }
    finally:
        nvml.nvmlShutdown()
