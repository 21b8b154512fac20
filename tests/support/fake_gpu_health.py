"""A fake pynvml for the GPU health readings (probes.fingerprint, probes.xid_watch).

It exposes the real module's constants and error classes (``pynvml.NVMLError(code)`` is the
subclass the real library raises for that code) and the call shapes the real functions have:
handles are opaque objects, violation status a struct with ``violationTime`` in ns, events a
struct with ``device``, ``eventType`` and ``eventData``; a wait with nothing to deliver raises
NVML_ERROR_TIMEOUT after its timeout, as the library does.
"""

from __future__ import annotations

import queue
import types
from dataclasses import dataclass, field
from typing import Any

import pynvml


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    sm_clock_mhz: int = 1980
    sm_clock_max_mhz: int = 1980
    mem_clock_mhz: int = 2619
    mem_clock_max_mhz: int = 2619
    power_limit_mw: int = 700_000
    temperature_c: int = 45
    ecc_uncorrected: int | None = 0  # None: the part has no ECC (NOT_SUPPORTED)
    violation_ns: dict[int, int] = field(default_factory=dict)  # policy -> cumulative ns
    xid_supported: bool = True


@dataclass(frozen=True)
class _Handle:
    index: int


def _refuse(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class FakeNvml(types.SimpleNamespace):
    """``FakeNvml(gpus)``: the pynvml functions the health readings call, over ``gpus``."""

    def __init__(self, gpus: list[FakeGpu], driver: str = "570.86.15", cuda: int = 12080) -> None:
        constants = {k: v for k, v in vars(pynvml).items() if k.isupper() or (k.startswith("nvml")
                     and not callable(v))}  # fmt: skip
        super().__init__(**constants)
        self.NVMLError = pynvml.NVMLError
        self.gpus = gpus
        self.driver = driver
        self.cuda = cuda
        self.events: queue.Queue[tuple[int, int]] = queue.Queue()
        self.inits = 0
        self.shutdowns = 0
        self.registered: list[int] = []

    # Lifetime and system.
    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        if not 0 <= index < len(self.gpus):
            raise _refuse(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(index)

    def nvmlDeviceGetIndex(self, handle: _Handle) -> int:
        return handle.index

    # Per-device readings.
    def _gpu(self, handle: _Handle) -> FakeGpu:
        return self.gpus[handle.index]

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return self._gpu(handle).name

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        return self._gpu(handle).uuid

    def nvmlDeviceGetClockInfo(self, handle: _Handle, clock: int) -> int:
        gpu = self._gpu(handle)
        return gpu.sm_clock_mhz if clock == pynvml.NVML_CLOCK_SM else gpu.mem_clock_mhz

    def nvmlDeviceGetMaxClockInfo(self, handle: _Handle, clock: int) -> int:
        gpu = self._gpu(handle)
        return gpu.sm_clock_max_mhz if clock == pynvml.NVML_CLOCK_SM else gpu.mem_clock_max_mhz

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:
        return self._gpu(handle).power_limit_mw

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        return self._gpu(handle).temperature_c

    def nvmlDeviceGetTotalEccErrors(self, handle: _Handle, error_type: int, counter: int) -> int:
        count = self._gpu(handle).ecc_uncorrected
        if count is None:
            raise _refuse(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return count

    def nvmlDeviceGetViolationStatus(self, handle: _Handle, policy: int) -> Any:
        status = pynvml.c_nvmlViolationTime_t()
        status.referenceTime = 0
        status.violationTime = self._gpu(handle).violation_ns.get(policy, 0)
        return status

    # Events.
    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlEventSetFree(self, event_set: object) -> None:
        return None

    def nvmlDeviceRegisterEvents(self, handle: _Handle, types_: int, event_set: object) -> None:
        if not self._gpu(handle).xid_supported:
            raise _refuse(pynvml.NVML_ERROR_NOT_SUPPORTED)
        self.registered.append(handle.index)

    def nvmlEventSetWait_v2(self, event_set: object, timeout_ms: int) -> Any:
        try:
            index, xid = self.events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise _refuse(pynvml.NVML_ERROR_TIMEOUT) from None
        return types.SimpleNamespace(
            device=_Handle(index), eventType=pynvml.nvmlEventTypeXidCriticalError,
            eventData=xid, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF,
        )  # fmt: skip

    def fire_xid(self, index: int, xid: int) -> None:
        """The driver reports XID ``xid`` on GPU ``index``."""
        self.events.put((index, xid))
