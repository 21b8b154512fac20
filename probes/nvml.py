"""NVML (and GPM) readings of every NVIDIA GPU, as a sampler.

Per GPU (label ``gpu`` = NVML index), source "nvml":
  gpu_util_pct, mem_util_pct   NVML utilization rates: % of the last sample period in which a
                               kernel ran / device memory was read or written
  memory_used_bytes, memory_total_bytes
  power_w                      board power draw
  energy_j                     energy counter since the driver loaded (differences give joules)
  sm_clock_mhz, mem_clock_mhz, temperature_c
  clocks_event_reasons         the throttle-reason bitmask (nvmlClocksEventReason*; 0 = none)
Source "gpm" (Hopper and newer, asked with nvmlGpmQueryDeviceSupport at run time), from two GPM
samples taken at least 100 ms apart (NVML's rule for meaningful rates):
  dram_bw_util_pct, sm_util_pct, sm_occupancy_pct, tensor_util_pct, and dram_bytes_per_s =
  dram_bw_util_pct / 100 * the part's peak bandwidth (perfmodel.hardware; absent for unknown parts).

Without the NVML library, a driver or a GPU, :meth:`NvmlSampler.open` returns why and nothing is
sampled. A reading a GPU does not support (NVMLError_NotSupported) is dropped for that GPU after
its first failure and listed in run.json; other failures are counted per tick.
The ``nvml`` argument takes a module with pynvml's interface, so the logic can be checked
against recorded readings without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from perfmodel.hardware import HardwareSpec, find_by_nvml_name
from probes.sampler import Emit, Sampler

GPM_MIN_INTERVAL_NS = 100_000_000
# Our name -> the pynvml constant holding the GPM metric id (resolved on the module in use).
GPM_METRICS = {
    "dram_bw_util_pct": "NVML_GPM_METRIC_DRAM_BW_UTIL",
    "sm_util_pct": "NVML_GPM_METRIC_SM_UTIL",
    "sm_occupancy_pct": "NVML_GPM_METRIC_SM_OCCUPANCY",
    "tensor_util_pct": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _read_util(nvml: ModuleType, h: Any) -> dict[str, float]:
    rates = nvml.nvmlDeviceGetUtilizationRates(h)
    return {"gpu_util_pct": rates.gpu, "mem_util_pct": rates.memory}


def _read_memory(nvml: ModuleType, h: Any) -> dict[str, float]:
    info = nvml.nvmlDeviceGetMemoryInfo(h)
    return {"memory_used_bytes": info.used, "memory_total_bytes": info.total}


def _read_clocks(nvml: ModuleType, h: Any) -> dict[str, float]:
    return {
        "sm_clock_mhz": nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM),
        "mem_clock_mhz": nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM),
    }


def _read_reasons(nvml: ModuleType, h: Any) -> dict[str, float]:
    # Renamed from "throttle" to "clocks event" reasons in NVML 12.2; older modules lack the new.
    read = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    read = read or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    return {"clocks_event_reasons": read(h)}


# Groups of readings: one NVML call (or two) each, dropped together when unsupported.
READINGS = {
    "utilization": _read_util,
    "memory": _read_memory,
    "power": lambda nvml, h: {"power_w": nvml.nvmlDeviceGetPowerUsage(h) / 1000.0},
    "energy": lambda nvml, h: {"energy_j": nvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0},
    "clocks": _read_clocks,
    "temperature": lambda nvml, h: {
        "temperature_c": nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)
    },
    "clocks_event_reasons": _read_reasons,
}


@dataclass
class _Device:
    index: int
    handle: Any
    name: str
    spec: HardwareSpec | None
    gpm: bool
    gpm_reason: str | None = None
    unsupported: dict[str, str] = field(default_factory=dict)
    gpm_buffers: list[Any] = field(default_factory=list)
    gpm_prev: int | None = None  # index into gpm_buffers of the last sample used
    gpm_prev_ns: int = 0

    @property
    def labels(self) -> dict[str, str]:
        return {"gpu": str(self.index)}


class NvmlSampler(Sampler):
    """Every GPU's NVML and GPM readings (module docstring) at ``interval_s`` (default 0.2 s)."""

    source = "nvml"

    def __init__(self, interval_s: float = 0.2, nvml: ModuleType | None = None, gpm: bool = True):
        super().__init__(interval_s)
        self._nvml = nvml
        self._want_gpm = gpm
        self.devices: list[_Device] = []
        self._open = False

    def open(self) -> str | None:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError as exc:
                return f"nvidia-ml-py is not installed ({exc}); GPU readings are not recorded"
            self._nvml = pynvml
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            return f"NVML is unavailable ({exc}): no NVIDIA driver here; no GPU readings"
        self._open = True
        count = nvml.nvmlDeviceGetCount()
        if count == 0:
            return "NVML found no GPU; no GPU readings"
        for index in range(count):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = _text(nvml.nvmlDeviceGetName(handle))
            device = _Device(index, handle, name, find_by_nvml_name(name), False)
            if self._want_gpm:
                device.gpm, device.gpm_reason = self._gpm_support(handle)
            if device.gpm:
                device.gpm_buffers = [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()]
            self.devices.append(device)
        return None

    def _gpm_support(self, handle: Any) -> tuple[bool, str | None]:
        nvml = self._nvml
        assert nvml is not None
        try:
            supported = bool(nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
        except nvml.NVMLError as exc:
            return False, f"nvmlGpmQueryDeviceSupport failed: {exc}"
        return supported, None if supported else "GPM is not supported (Hopper or newer needed)"

    def sample(self, t_ns: int, emit: Emit) -> None:
        nvml = self._nvml
        assert nvml is not None
        failures: list[str] = []
        for device in self.devices:
            labels = device.labels
            for group, read in READINGS.items():
                if group in device.unsupported:
                    continue
                try:
                    values = read(nvml, device.handle)
                except nvml.NVMLError as exc:
                    if isinstance(exc, getattr(nvml, "NVMLError_NotSupported", ())):
                        device.unsupported[group] = str(exc)
                    else:
                        failures.append(f"gpu {device.index} {group}: {exc}")
                    continue
                for name, value in values.items():
                    emit(name, float(value), labels)
            if device.gpm:
                try:
                    self._sample_gpm(device, t_ns, emit)
                except nvml.NVMLError as exc:
                    failures.append(f"gpu {device.index} gpm: {exc}")
        if failures:
            raise RuntimeError("; ".join(failures))

    def _sample_gpm(self, device: _Device, t_ns: int, emit: Emit) -> None:
        nvml = self._nvml
        assert nvml is not None
        prev = device.gpm_prev
        current = 0 if prev is None else 1 - prev
        if prev is not None and t_ns - device.gpm_prev_ns < GPM_MIN_INTERVAL_NS:
            return  # too close to the last sample for NVML to give a meaningful rate
        nvml.nvmlGpmSampleGet(device.handle, device.gpm_buffers[current])
        if prev is not None:
            metrics = gpm_metrics(nvml, device.gpm_buffers[prev], device.gpm_buffers[current])
            labels = device.labels
            for name, value in metrics.items():
                emit(name, value, labels, source="gpm")
            util = metrics.get("dram_bw_util_pct")
            if util is not None and device.spec is not None:
                bytes_per_s = util / 100.0 * device.spec.memory_bytes_per_s
                emit("dram_bytes_per_s", bytes_per_s, labels, source="gpm")
        device.gpm_prev, device.gpm_prev_ns = current, t_ns

    def close(self) -> None:
        nvml = self._nvml
        if nvml is None or not self._open:
            return
        for device in self.devices:
            for buffer in device.gpm_buffers:
                nvml.nvmlGpmSampleFree(buffer)
            device.gpm_buffers = []
        nvml.nvmlShutdown()
        self._open = False

    def describe(self) -> dict[str, Any]:
        return {
            "gpus": [
                {
                    "index": d.index,
                    "name": d.name,
                    "hardware_table": d.spec.key if d.spec else None,
                    "gpm": d.gpm,
                    "gpm_reason": d.gpm_reason,
                    "unsupported": dict(d.unsupported),
                }
                for d in self.devices
            ]
        }


def gpm_metrics(nvml: ModuleType, sample1: Any, sample2: Any) -> dict[str, float]:
    """GPM metrics between two samples (sample2 later), by our names; metrics NVML could not
    compute (nvmlReturn != NVML_SUCCESS) are left out."""
    wanted = [(name, getattr(nvml, const)) for name, const in GPM_METRICS.items()]
    request = nvml.c_nvmlGpmMetricsGet_t()
    request.version = nvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(wanted)
    request.sample1 = sample1
    request.sample2 = sample2
    for i, (_, metric_id) in enumerate(wanted):
        request.metrics[i].metricId = metric_id
    nvml.nvmlGpmMetricsGet(request)
    return {
        name: float(request.metrics[i].value)
        for i, (name, _) in enumerate(wanted)
        if request.metrics[i].nvmlReturn == nvml.NVML_SUCCESS
    }
