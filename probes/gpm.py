"""GPM (GPU Performance Monitoring, Hopper and newer): per-GPU or per-MIG-instance rates.

A :class:`GpmTarget` is one GPU, or one MIG instance of it (``gpu_instance_id``: sampled with
``nvmlGpmMigSampleGet``), with its two sample buffers. :func:`open_gpm` asks NVML whether the
GPU supports GPM and then takes a test sample: a container without CAP_SYS_ADMIN gets
``NVML_ERROR_NO_PERMISSION`` there, which, like NotSupported, means GPM is off for the run with
the reason said (run.json), instead of a failure at every tick. Rates come from two samples at
least 100 ms apart (NVML's rule for meaningful rates); a rate NVML gives as NaN or infinite is
dropped, never averaged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

GPM_MIN_INTERVAL_NS = 100_000_000
# Our name -> the pynvml constant holding the GPM metric id (resolved on the module in use).
GPM_METRICS = {
    "dram_bw_util_pct": "NVML_GPM_METRIC_DRAM_BW_UTIL",
    "sm_util_pct": "NVML_GPM_METRIC_SM_UTIL",
    "sm_occupancy_pct": "NVML_GPM_METRIC_SM_OCCUPANCY",
    "tensor_util_pct": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
}


@dataclass
class GpmTarget:
    """One GPU (``gpu_instance_id`` None) or MIG instance that GPM samples."""

    handle: Any
    gpu_instance_id: int | None
    buffers: list[Any] = field(default_factory=list)
    prev: int | None = None  # index into buffers of the last sample used
    prev_ns: int = 0

    def take(self, nvml: ModuleType, buffer: Any) -> None:
        if self.gpu_instance_id is None:
            nvml.nvmlGpmSampleGet(self.handle, buffer)
        else:
            nvml.nvmlGpmMigSampleGet(self.handle, self.gpu_instance_id, buffer)

    def free(self, nvml: ModuleType) -> None:
        for buffer in self.buffers:
            nvml.nvmlGpmSampleFree(buffer)
        self.buffers = []


def open_gpm(nvml: ModuleType, target: GpmTarget) -> str | None:
    """Prepare ``target``: None when GPM answers (buffers allocated, a test sample taken), else
    why GPM is off for it."""
    try:
        supported = bool(nvml.nvmlGpmQueryDeviceSupport(target.handle).isSupportedDevice)
    except nvml.NVMLError as exc:
        return f"GPM is off: nvmlGpmQueryDeviceSupport failed ({exc})"
    if not supported:
        return "GPM is off: not supported on this GPU (Hopper or newer needed)"
    target.buffers = [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()]
    try:
        target.take(nvml, target.buffers[0])
    except nvml.NVMLError as exc:
        target.free(nvml)
        if isinstance(exc, getattr(nvml, "NVMLError_NoPermission", ())):
            return (f"GPM is off: the test sample was refused ({exc}); profiling needs "
                    "CAP_SYS_ADMIN (a container: --cap-add SYS_ADMIN)")  # fmt: skip
        return f"GPM is off: the test sample failed ({exc})"
    target.prev = None  # the test sample is not a reading: the first tick starts afresh
    return None


def sample_gpm(nvml: ModuleType, target: GpmTarget, t_ns: int) -> tuple[dict[str, float], int]:
    """Take a sample at ``t_ns``; the rates since the last one (by our names) and how many NVML
    gave as NaN or infinite (dropped). Nothing when too soon after the last sample."""
    prev = target.prev
    if prev is not None and t_ns - target.prev_ns < GPM_MIN_INTERVAL_NS:
        return {}, 0
    current = 0 if prev is None else 1 - prev
    target.take(nvml, target.buffers[current])
    rates: dict[str, float] = {}
    dropped = 0
    if prev is not None:
        rates = gpm_metrics(nvml, target.buffers[prev], target.buffers[current])
        finite = {k: v for k, v in rates.items() if math.isfinite(v)}
        dropped, rates = len(rates) - len(finite), finite
    target.prev, target.prev_ns = current, t_ns
    return rates, dropped


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
