"""NVML (and GPM) readings of the engine's GPUs, as a sampler.

Which GPUs: :mod:`probes.gpu_scope` resolves them when the sampler opens (the engine's processes,
else its CUDA_VISIBLE_DEVICES, else ``--gpus``, else every GPU, said plainly); only those are
sampled, each its own series, and :meth:`NvmlSampler.describe` puts the scope in run.json.

Per GPU (label ``gpu`` = NVML index), source "nvml":
  gpu_util_pct, mem_util_pct   NVML utilization rates: % of the last sample period in which a
                               kernel ran / device memory was read or written
  memory_used_bytes, memory_total_bytes
  power_w                      board power draw: NVML_FI_DEV_POWER_INSTANT on Hopper and newer
                               where the field answers, else nvmlDeviceGetPowerUsage (a 1 s
                               average on Hopper and newer); run.json says which
  energy_j                     energy counter since the driver loaded (differences give joules)
  sm_clock_mhz, mem_clock_mhz, temperature_c
  clocks_event_reasons         the throttle-reason bitmask (nvmlClocksEventReason*; 0 = none)
  process_gpu_memory_bytes     per other process on the GPU (labels pid, process): a compute
                               process that is not the engine's, which shares its readings
Source "gpm" (probes.gpm; per MIG instance, label ``gpu_instance``, where the engine runs on one):
  dram_bw_util_pct, sm_util_pct, sm_occupancy_pct, tensor_util_pct, and dram_bytes_per_s =
  dram_bw_util_pct / 100 * the part's peak bandwidth (perfmodel.hardware; absent for unknown
  parts), times the instance's memory share on a MIG instance.

Without the NVML library, a driver or a GPU, :meth:`NvmlSampler.open` returns why and nothing is
sampled. A reading a GPU does not support (NVMLError_NotSupported) is dropped for that GPU after
its first failure and listed in run.json; other failures are counted per tick; a NaN or infinite
reading is dropped (never averaged) and counted in run.json.
The ``nvml`` argument takes a module with pynvml's interface, so the logic can be checked
against recorded readings without a GPU (tests/support/fake_nvml.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from perfmodel.files import JSONObject
from perfmodel.hardware import HardwareSpec, find_by_nvml_name
from probes.gpm import GPM_MIN_INTERVAL_NS, GpmTarget, gpm_metrics, open_gpm, sample_gpm
from probes.gpu_scope import (
    GpuScope,
    GpuScopeError,
    engine_environment,
    process_name,
    process_tree,
    resolve_scope,
    running_processes,
)
from probes.sampler import Emit, Sampler
from results.folder import sample_sources

__all__ = ["GPM_MIN_INTERVAL_NS", "NvmlSampler", "gpm_metrics"]

INSTANT_POWER = "NVML_FI_DEV_POWER_INSTANT"
AVERAGE_POWER = "nvmlDeviceGetPowerUsage"


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


def instant_power_w(nvml: ModuleType, h: Any) -> float | None:
    """NVML_FI_DEV_POWER_INSTANT in watts, or None where the field does not answer."""
    field_id = getattr(nvml, INSTANT_POWER, None)
    if field_id is None:
        return None
    value = nvml.nvmlDeviceGetFieldValues(h, [field_id])[0]
    if value.nvmlReturn != nvml.NVML_SUCCESS:
        return None
    return float(value.value.uiVal) / 1000.0


def _read_power(nvml: ModuleType, h: Any, instant: bool) -> dict[str, float]:
    watts = instant_power_w(nvml, h) if instant else None
    return {"power_w": watts if watts is not None else nvml.nvmlDeviceGetPowerUsage(h) / 1000.0}


# Groups of readings: one NVML call (or two) each, dropped together when unsupported.
READINGS = {
    "utilization": _read_util,
    "memory": _read_memory,
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
    gpm: bool = False
    gpm_reason: str | None = None
    power_source: str = AVERAGE_POWER
    unsupported: dict[str, str] = field(default_factory=dict)
    gpm_targets: list[GpmTarget] = field(default_factory=list)
    memory_fraction: dict[int, float] = field(default_factory=dict)  # GPU instance -> share

    @property
    def labels(self) -> dict[str, str]:
        return {"gpu": str(self.index)}


def _is_hopper_or_newer(nvml: ModuleType, handle: Any) -> bool:
    try:
        return int(nvml.nvmlDeviceGetArchitecture(handle)) >= nvml.NVML_DEVICE_ARCH_HOPPER
    except (nvml.NVMLError, AttributeError):
        return False


class NvmlSampler(Sampler):
    """The engine's GPUs' NVML and GPM readings (module docstring) at ``interval_s``.

    ``engine_pid``: the root of the engine's processes; ``cuda_visible_devices`` and
    ``cuda_device_order``: the engine's, when bench launched it (its own environment is read
    first); ``gpus``: the user's --gpus. See probes.gpu_scope for the order they are tried in.
    """

    source = sample_sources.NVML

    def __init__(
        self,
        interval_s: float = 0.2,
        nvml: ModuleType | None = None,
        gpm: bool = True,
        engine_pid: int | None = None,
        cuda_visible_devices: str | None = None,
        cuda_device_order: str | None = None,
        gpus: str | None = None,
    ):
        super().__init__(interval_s)
        self._nvml = nvml
        self._want_gpm = gpm
        self._engine_pid = engine_pid
        self._visible = cuda_visible_devices
        self._order = cuda_device_order
        self._gpus = gpus
        self.devices: list[_Device] = []
        self.scope: GpuScope | None = None
        self._engine_pids: set[int] = set()
        self._names: dict[int, str] = {}
        self.dropped_non_finite: dict[str, int] = {}
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
            return (
                f"NVML is unavailable ({exc}): no NVIDIA driver here; no GPU readings and no "
                "energy figures"
            )
        self._open = True
        if nvml.nvmlDeviceGetCount() == 0:
            return "NVML found no GPU; no GPU readings"
        self._engine_pids = process_tree(self._engine_pid)
        visible = engine_environment(self._engine_pid, "CUDA_VISIBLE_DEVICES")
        order = engine_environment(self._engine_pid, "CUDA_DEVICE_ORDER")
        try:
            self.scope = resolve_scope(
                nvml, self._engine_pids, visible if visible is not None else self._visible,
                self._gpus, order if order is not None else self._order,
            )  # fmt: skip
        except GpuScopeError as exc:
            return f"--gpus: {exc}; no GPU readings"
        if not self.scope.gpus:
            return f"{self.scope.reason}: the engine sees no GPU; no GPU readings"
        for index in self.scope.indices:
            self.devices.append(self._device(index))
        return None

    def _device(self, index: int) -> _Device:
        nvml = self._nvml
        assert nvml is not None and self.scope is not None
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        name = _text(nvml.nvmlDeviceGetName(handle))
        device = _Device(index, handle, name, find_by_nvml_name(name))
        if _is_hopper_or_newer(nvml, handle):
            try:
                if instant_power_w(nvml, handle) is not None:
                    device.power_source = INSTANT_POWER
            except nvml.NVMLError:
                pass
        slices = [g.mig for g in self.scope.gpus if g.index == index and g.mig is not None]
        device.gpm_targets = [GpmTarget(handle, m.gpu_instance_id) for m in slices]
        device.memory_fraction = {m.gpu_instance_id: m.memory_fraction for m in slices}
        device.gpm_targets = device.gpm_targets or [GpmTarget(handle, None)]
        if not self._want_gpm:
            device.gpm_reason = "GPM is off: not asked for"
            return device
        reasons = [open_gpm(nvml, t) for t in device.gpm_targets]
        device.gpm_reason = next((r for r in reasons if r), None)
        if device.gpm_reason:
            for target in device.gpm_targets:
                target.free(nvml)
        device.gpm = device.gpm_reason is None
        if slices:
            per_instance = (
                "GPM gives each instance's own rates"
                if device.gpm
                else f"no per-instance reading ({device.gpm_reason})"
            )
            self.scope.notes.append(
                f"GPU {index} is in MIG mode: its NVML readings (power, energy, clocks, memory) "
                f"are whole-GPU, shared with its other instances; {per_instance}"
            )
        return device

    def _emit(self, emit: Emit, name: str, value: float, labels: dict[str, str], **kw: Any) -> None:
        if math.isfinite(value):
            emit(name, value, labels, **kw)
        else:
            self.dropped_non_finite[name] = self.dropped_non_finite.get(name, 0) + 1

    def sample(self, t_ns: int, emit: Emit) -> None:
        nvml = self._nvml
        assert nvml is not None
        failures: list[str] = []
        for device in self.devices:
            labels = device.labels
            groups = {**READINGS, "power": lambda n, h, d=device: _read_power(
                n, h, d.power_source == INSTANT_POWER)}  # fmt: skip
            for group, read in groups.items():
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
                    self._emit(emit, name, float(value), labels)
            self._other_processes(device, emit)
            if device.gpm:
                try:
                    self._sample_gpm(device, t_ns, emit)
                except nvml.NVMLError as exc:
                    failures.append(f"gpu {device.index} gpm: {exc}")
        if failures:
            raise RuntimeError("; ".join(failures))

    def _other_processes(self, device: _Device, emit: Emit) -> None:
        """Emit the memory of each compute process on ``device`` that is not the engine's."""
        nvml = self._nvml
        assert nvml is not None
        for proc in running_processes(nvml, device.handle, device.index):
            if proc.pid in self._engine_pids:
                continue
            if proc.pid not in self._names:
                self._names[proc.pid] = process_name(nvml, proc.pid)
            labels = {**device.labels, "pid": str(proc.pid), "process": self._names[proc.pid]}
            self._emit(emit, "process_gpu_memory_bytes", float(proc.used_bytes), labels)

    def _sample_gpm(self, device: _Device, t_ns: int, emit: Emit) -> None:
        nvml = self._nvml
        assert nvml is not None
        for target in device.gpm_targets:
            metrics, dropped = sample_gpm(nvml, target, t_ns)
            if dropped:
                gpm = sample_sources.GPM
                self.dropped_non_finite[gpm] = self.dropped_non_finite.get(gpm, 0) + dropped
            labels = device.labels
            share = 1.0
            if target.gpu_instance_id is not None:
                labels = {**labels, "gpu_instance": str(target.gpu_instance_id)}
                share = device.memory_fraction[target.gpu_instance_id]
            for name, value in metrics.items():
                emit(name, value, labels, source=sample_sources.GPM)
            util = metrics.get("dram_bw_util_pct")
            if util is not None and device.spec is not None:
                bytes_per_s = util / 100.0 * device.spec.memory_bytes_per_s * share
                emit("dram_bytes_per_s", bytes_per_s, labels, source=sample_sources.GPM)

    def close(self) -> None:
        nvml = self._nvml
        if nvml is None or not self._open:
            return
        for device in self.devices:
            for target in device.gpm_targets:
                target.free(nvml)
        nvml.nvmlShutdown()
        self._open = False

    def describe(self) -> JSONObject:
        return {
            "scope": self.scope.to_json() if self.scope else None,
            "gpus": [
                {
                    "index": d.index,
                    "name": d.name,
                    "hardware_table": d.spec.key if d.spec else None,
                    "gpm": d.gpm,
                    "gpm_reason": d.gpm_reason,
                    "gpm_per_instance": d.gpm and d.gpm_targets[0].gpu_instance_id is not None,
                    "power_source": d.power_source,
                    "unsupported": dict(d.unsupported),
                }
                for d in self.devices
            ],
            "dropped_non_finite": dict(self.dropped_non_finite),
        }
