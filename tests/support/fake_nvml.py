"""A fake NVML: a module with pynvml's interface over GPUs a test describes, for the probes.

Built from pynvml's call shapes (nvidia-ml-py 12.x, read from its source): handles are opaque
objects; names and UUIDs are ``str``; memory, utilization and GPM support come back as objects
with pynvml's attribute names; running processes as pynvml's own ``c_nvmlProcessInfo_t``;
field values as a ctypes array of pynvml's ``c_nvmlFieldValue_t``; GPM samples and metric
requests are pynvml's real ctypes structures, so what the code under test builds is what the
real library would receive. Every failure is raised as ``pynvml.NVMLError(code)`` with NVML's
real return code, which pynvml turns into its subclass (``NVMLError_NoPermission``, ...), so
``except nvml.NVMLError_NotSupported`` works as on a real host.

Extending it: describe a GPU with :class:`FakeGpu` (add a field for a new reading) and add a
method named like the pynvml function to :class:`FakeNvml`; :meth:`FakeNvml.module` exposes
every public method whose name starts with ``nvml``. A GPU's ``fail`` maps a function name to
an NVML return code that call raises, for any reading not modelled otherwise.
"""

from __future__ import annotations

import ctypes
import itertools
import queue
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pynvml

MIB = 2**20
H100 = "NVIDIA H100 80GB HBM3"
H100_MEMORY = 81559 * MIB  # NVML's total for an H100 SXM 80GB
H100_SMS = 132


@dataclass
class FakeMig:
    """One MIG instance of a GPU: its GPU instance id, SMs and memory (an H100's 3g.40gb has
    60 SMs and 40,192 MiB)."""

    uuid: str
    gpu_instance_id: int
    sm_count: int
    memory_mib: int


@dataclass
class FakeProcess:
    pid: int
    name: str
    used_bytes: int = 1 << 30
    gpu_instance_id: int = 0xFFFFFFFF  # NVML's "not on a MIG instance"


@dataclass
class FakeGpu:
    """One GPU as NVML shows it. ``readings(tick)`` gives the per-tick figures (utilization,
    power in mW, energy in mJ, GPM rates in percent); defaults idle at 70 W."""

    uuid: str
    name: str = H100
    memory_total: int = H100_MEMORY
    architecture: int = pynvml.NVML_DEVICE_ARCH_HOPPER
    processes: list[FakeProcess] = field(default_factory=list)
    migs: list[FakeMig] = field(default_factory=list)
    gpm: str = "supported"  # "supported", "no_permission" (sample get fails), "unsupported"
    instant_power: bool = True  # NVML_FI_DEV_POWER_INSTANT answers
    readings: Callable[[int], Mapping[str, float]] | None = None
    fail: dict[str, int] = field(default_factory=dict)
    # Health (probes.fingerprint, probes.xid_watch): clocks' maxima, the enforced power limit,
    # uncorrected ECC errors (None: a part without ECC, NOT_SUPPORTED), NVML's cumulative
    # throttle time per NVML_PERF_POLICY_* in ns, and whether XID events can be registered.
    sm_clock_max_mhz: int = 1980
    mem_clock_max_mhz: int = 2619
    power_limit_mw: int = 700_000
    ecc_uncorrected: int | None = 0
    violation_ns: dict[int, int] = field(default_factory=dict)
    xid_supported: bool = True

    def reading(self, tick: int) -> Mapping[str, float]:
        base = {"gpu_util": 0.0, "mem_util": 0.0, "used": 1 << 30, "power_mw": 70_000.0,
                "energy_mj": 1_000_000.0 + 14_000.0 * tick, "dram": 0.0, "sm": 0.0,
                "occ": 0.0, "tensor": 0.0}  # fmt: skip
        return {**base, **(self.readings(tick) if self.readings else {})}


@dataclass(frozen=True)
class _Handle:
    index: int
    mig: int | None = None  # index into FakeGpu.migs for a MIG device handle


_GPM_NAMES = {
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: "dram",
    pynvml.NVML_GPM_METRIC_SM_UTIL: "sm",
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: "occ",
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: "tensor",
}


def _error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class FakeNvml:
    """The fake library over ``gpus`` (NVML index order). ``tick`` selects the readings."""

    def __init__(self, gpus: list[FakeGpu], driver: str = "570.86.15", cuda: int = 12080) -> None:
        self.gpus = gpus
        self.driver = driver
        self.cuda = cuda
        self.tick = 0
        self.initialised = 0
        self.calls: list[str] = []
        self.registered: list[int] = []  # GPUs registered for XID events
        self._xids: queue.Queue[tuple[int, int]] = queue.Queue()
        self._samples: dict[int, tuple[int, int | None, int]] = {}  # address -> gpu, gi, tick

    def module(self) -> types.ModuleType:
        """A module with pynvml's constants, structures and error classes, and this fake's
        functions."""
        nvml = types.ModuleType("fake_pynvml")
        for name in dir(pynvml):
            if name.startswith(
                ("NVML_", "c_nvml", "struct_c_nvml", "NVMLError", "nvmlEventType",
                 "nvmlClocksEventReason")
            ):  # fmt: skip
                setattr(nvml, name, getattr(pynvml, name))
        for name in dir(self):
            if name.startswith("nvml"):
                setattr(nvml, name, self._recorded(name, getattr(self, name)))
        return nvml

    def _recorded(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            self.calls.append(name)
            handle = next((a for a in args if isinstance(a, _Handle)), None)
            if handle is not None and name in self.gpus[handle.index].fail:
                raise _error(self.gpus[handle.index].fail[name])
            return fn(*args)

        return call

    def _gpu(self, handle: _Handle) -> FakeGpu:
        return self.gpus[handle.index]

    # -- the library and its devices
    def nvmlInit(self) -> None:
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        if not 0 <= index < len(self.gpus):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(index)

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return self._gpu(handle).name

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        gpu = self._gpu(handle)
        return gpu.migs[handle.mig].uuid if handle.mig is not None else gpu.uuid

    def nvmlDeviceGetArchitecture(self, handle: _Handle) -> int:
        return self._gpu(handle).architecture

    # -- readings
    def nvmlDeviceGetMemoryInfo(self, handle: _Handle) -> Any:
        gpu = self._gpu(handle)
        used = gpu.reading(self.tick)["used"]
        return types.SimpleNamespace(
            total=gpu.memory_total, used=used, free=gpu.memory_total - used
        )

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> Any:
        gpu = self._gpu(handle)
        if gpu.migs:  # NVML has no utilization rates for a GPU in MIG mode
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        r = gpu.reading(self.tick)
        return types.SimpleNamespace(gpu=r["gpu_util"], memory=r["mem_util"])

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        return int(self._gpu(handle).reading(self.tick)["power_mw"])

    def nvmlDeviceGetFieldValues(self, handle: _Handle, field_ids: list[int]) -> Any:
        gpu = self._gpu(handle)
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        for i, field_id in enumerate(field_ids):
            values[i].fieldId = field_id
            if field_id == pynvml.NVML_FI_DEV_POWER_INSTANT and gpu.instant_power:
                values[i].nvmlReturn = pynvml.NVML_SUCCESS
                values[i].valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                # The instant reading sits above the 1 s average while the load ramps.
                values[i].value.uiVal = int(gpu.reading(self.tick)["power_mw"]) + 5_000
            else:
                values[i].nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return values

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: _Handle) -> int:
        return int(self._gpu(handle).reading(self.tick)["energy_mj"])

    def nvmlDeviceGetClockInfo(self, handle: _Handle, clock: int) -> int:
        gpu = self._gpu(handle)
        return gpu.sm_clock_max_mhz if clock == pynvml.NVML_CLOCK_SM else gpu.mem_clock_max_mhz

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        return 40

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: _Handle) -> int:
        return 0

    # -- health
    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda

    def nvmlDeviceGetIndex(self, handle: _Handle) -> int:
        return handle.index

    def nvmlDeviceGetMaxClockInfo(self, handle: _Handle, clock: int) -> int:
        gpu = self._gpu(handle)
        return gpu.sm_clock_max_mhz if clock == pynvml.NVML_CLOCK_SM else gpu.mem_clock_max_mhz

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:
        return self._gpu(handle).power_limit_mw

    def nvmlDeviceGetTotalEccErrors(self, handle: _Handle, error_type: int, counter: int) -> int:
        count = self._gpu(handle).ecc_uncorrected
        if count is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return count

    def nvmlDeviceGetViolationStatus(self, handle: _Handle, policy: int) -> Any:
        status = pynvml.c_nvmlViolationTime_t()
        status.referenceTime = 0
        status.violationTime = self._gpu(handle).violation_ns.get(policy, 0)
        return status

    # -- XID events: a wait with nothing to deliver raises NVML_ERROR_TIMEOUT after its
    # timeout, as the library does.
    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlEventSetFree(self, event_set: object) -> None:
        return None

    def nvmlDeviceRegisterEvents(self, handle: _Handle, kinds: int, event_set: object) -> None:
        if not self._gpu(handle).xid_supported:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        self.registered.append(handle.index)

    def nvmlEventSetWait_v2(self, event_set: object, timeout_ms: int) -> Any:
        try:
            index, xid = self._xids.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise _error(pynvml.NVML_ERROR_TIMEOUT) from None
        data = pynvml.c_nvmlEventData_t()
        data.eventType, data.eventData = pynvml.nvmlEventTypeXidCriticalError, xid
        return types.SimpleNamespace(device=_Handle(index), eventType=data.eventType,
                                     eventData=data.eventData)  # fmt: skip

    def fire_xid(self, index: int, xid: int) -> None:
        """The driver reports XID ``xid`` on GPU ``index``."""
        self._xids.put((index, xid))

    def xids_pending(self) -> int:
        return self._xids.qsize()

    # -- processes
    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list[Any]:
        out = []
        for p in self._gpu(handle).processes:
            info = pynvml.c_nvmlProcessInfo_t()
            info.pid, info.usedGpuMemory = p.pid, p.used_bytes
            info.gpuInstanceId, info.computeInstanceId = p.gpu_instance_id, 0xFFFFFFFF
            out.append(info)
        return out

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        for p in itertools.chain.from_iterable(g.processes for g in self.gpus):
            if p.pid == pid:
                return p.name
        raise _error(pynvml.NVML_ERROR_NOT_FOUND)

    # -- MIG
    def nvmlDeviceGetMigMode(self, handle: _Handle) -> list[int]:
        on = pynvml.NVML_DEVICE_MIG_ENABLE if self._gpu(handle).migs else 0
        return [on, on]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _Handle) -> int:
        return 7 if self._gpu(handle).migs else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _Handle, index: int) -> _Handle:
        if index >= len(self._gpu(handle).migs):
            raise _error(pynvml.NVML_ERROR_NOT_FOUND)
        return _Handle(handle.index, index)

    def nvmlDeviceGetGpuInstanceId(self, handle: _Handle) -> int:
        assert handle.mig is not None, "asked of a MIG device handle only"
        return self._gpu(handle).migs[handle.mig].gpu_instance_id

    def nvmlDeviceGetAttributes(self, handle: _Handle) -> Any:
        gpu = self._gpu(handle)
        attrs = pynvml.c_nvmlDeviceAttributes()
        if handle.mig is None:
            attrs.multiprocessorCount, attrs.memorySizeMB = H100_SMS, gpu.memory_total // MIB
        else:
            mig = gpu.migs[handle.mig]
            attrs.multiprocessorCount, attrs.memorySizeMB = mig.sm_count, mig.memory_mib
        return attrs

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, handle: _Handle, profile: int, version: int = 2
    ) -> Any:
        if profile != pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        info = pynvml.c_nvmlGpuInstanceProfileInfo_t()
        info.sliceCount, info.multiprocessorCount = 7, H100_SMS
        info.memorySizeMB = self._gpu(handle).memory_total // MIB
        return info

    # -- GPM
    def nvmlGpmQueryDeviceSupport(self, handle: _Handle) -> Any:
        supported = self._gpu(handle).gpm != "unsupported"
        return types.SimpleNamespace(isSupportedDevice=int(supported))

    def nvmlGpmSampleAlloc(self) -> Any:
        return ctypes.pointer(pynvml.struct_c_nvmlGpmSample_t())

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self._samples.pop(ctypes.addressof(sample.contents), None)

    def _take(self, handle: _Handle, instance: int | None, sample: Any) -> Any:
        gpu = self._gpu(handle)
        if gpu.gpm == "no_permission":  # a container without CAP_SYS_ADMIN
            raise _error(pynvml.NVML_ERROR_NO_PERMISSION)
        if gpu.gpm == "unsupported":
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        self._samples[ctypes.addressof(sample.contents)] = (handle.index, instance, self.tick)
        return sample

    def nvmlGpmSampleGet(self, handle: _Handle, sample: Any) -> Any:
        return self._take(handle, None, sample)

    def nvmlGpmMigSampleGet(self, handle: _Handle, gpu_instance_id: int, sample: Any) -> Any:
        return self._take(handle, gpu_instance_id, sample)

    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        assert request.version == pynvml.NVML_GPM_METRICS_GET_VERSION
        index, instance, _ = self._samples[ctypes.addressof(request.sample1.contents)]
        index2, instance2, tick2 = self._samples[ctypes.addressof(request.sample2.contents)]
        assert (index, instance) == (index2, instance2), "the two samples are of one device"
        rates = self.gpus[index].reading(tick2)
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            value = rates[_GPM_NAMES[metric.metricId]]
            if instance is not None:
                value = value / 2 + instance  # each instance its own figure
            metric.value = value
            metric.nvmlReturn = pynvml.NVML_SUCCESS
        return request


def eight_gpus(
    engine_on: tuple[int, ...] = (2, 5), engine_pids: tuple[int, ...] = (4242,)
) -> list[FakeGpu]:
    """Eight H100s; the engine's processes (``engine_pids``) hold memory on ``engine_on``."""
    gpus = [FakeGpu(uuid=f"GPU-{i:08x}-1111-2222-3333-44445555{i:04x}") for i in range(8)]
    for i in engine_on:
        gpus[i].processes = [FakeProcess(pid, "python3", 60 << 30) for pid in engine_pids]
    return gpus
