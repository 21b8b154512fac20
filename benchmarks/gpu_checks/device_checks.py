"""NVML and GPM readings during a matmul loop: the GPU probe's figures are sane where the
load is known. The loop alternates bf16 matmuls (tensor cores) with large copies (DRAM) on
cuda:0 for :data:`LOAD_S` seconds while the project's NVML sampler (probes.nvml) ticks.

The sampler is scoped as it scopes an engine (probes.gpu_scope): to the GPU on which NVML
lists this process (the check's CUDA context exists before the loop), else the one
CUDA_VISIBLE_DEVICES names; a node where neither tells is a MISS that says to pin the GPU.
Two lines read the same kind of loop: NVML's (energy, power, SM activity) and GPM's (tensor
and DRAM activity, Hopper and newer). SM activity is GPM's SM utilization where GPM answers,
else NVML's utilization rate (the share of the period a kernel ran); each figure says its
source. A GPM refused on a part that has it (no CAP_SYS_ADMIN) makes the GPM line a MISS.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from benchmarks.gpu_checks.rows import Row, passed, skipped
from probes.nvml import NvmlSampler
from probes.sampler import SamplerThread

LOAD_S = 4.0
SAMPLE_INTERVAL_S = 0.2
# Mean board power may exceed the enforced limit by this share: the limit holds over the
# driver's averaging window, and excursions of a few tenths of a second above it are normal
# (an H200 at a 700 W limit read 749 W for a moment under this loop).
POWER_LIMIT_MARGIN = 0.05
# The energy counter against the integral of the power readings over the same interval: the
# readings are samples of a fluctuating draw every SAMPLE_INTERVAL_S, whose trapezoid misses
# what happens between them; a counter that disagrees by more is reading something else.
ENERGY_TOLERANCE = 0.25
# What "busy" must read during the loop (percent of the part's peak, or of the sample period).
MIN_SM_UTIL_PCT = 50.0
MIN_TENSOR_UTIL_PCT = 5.0
MIN_DRAM_BW_UTIL_PCT = 10.0


def matmul_load(seconds: float) -> None:
    """The known load on cuda:0 for ``seconds``."""
    device = torch.device("cuda:0")
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    src = torch.empty(2**28, device=device, dtype=torch.float32)  # 1 GiB, far beyond L2
    dst = torch.empty_like(src)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for _ in range(8):
            torch.mm(a, b)
        dst.copy_(src)
        torch.cuda.synchronize(device)


# What the lines run and read: CPU tests give a fake load and a fake NVML (pynvml's interface).
LOAD: Callable[[float], None] = matmul_load
NVML: ModuleType | None = None


def _nvml() -> ModuleType:
    if NVML is not None:
        return NVML
    import pynvml

    return pynvml


def _series(buffer: Any, name: str) -> list[float]:
    return [v for _, v in _timed_series(buffer, name)]


def _timed_series(buffer: Any, name: str) -> list[tuple[float, float]]:
    """(seconds on the sampler's clock, value) of every reading called ``name``."""
    cols = buffer.columns()
    return [(t / 1e9, v) for t, n, v in zip(cols["t_ns"], cols["name"], cols["value"], strict=True)
            if n == name]  # fmt: skip


def integrated_energy_j(power: list[tuple[float, float]], start: float, end: float) -> float:
    """Joules of the power readings (seconds, watts) between ``start`` and ``end`` seconds:
    the trapezoid over the readings inside, each end held at its nearest reading."""
    inside = [(t, w) for t, w in power if start <= t <= end]
    if not inside:
        return 0.0
    points = [(start, inside[0][1]), *inside, (end, inside[-1][1])]
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in itertools.pairwise(points))


def _sampled(name: str) -> tuple[dict[str, list[float]], dict[str, Any]] | Row:
    """The loop's readings by name and the sampler's GPU (its describe() entry, with the
    scope), or the MISS row saying why there are none."""
    sampler = NvmlSampler(SAMPLE_INTERVAL_S, nvml=_nvml(), engine_pid=os.getpid(),
                          cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))  # fmt: skip
    thread = SamplerThread(sampler)
    reason = thread.start()
    if reason is not None:
        return Row(name, "MISS", detail=f"the NVML sampler did not start: {reason}")
    try:
        LOAD(LOAD_S)
    finally:
        thread.stop()
    described = sampler.describe()
    scope = described.get("scope") or {}
    if scope.get("how") == "all" and len(described["gpus"]) > 1:
        return Row(name, "MISS", detail=f"which GPU is cuda:0 is unknown ({scope.get('reason')});"
                   " pin it: CUDA_VISIBLE_DEVICES=GPU-<uuid>")  # fmt: skip
    names = ("energy_j", "power_w", "gpu_util_pct", "sm_util_pct", "tensor_util_pct",
             "dram_bw_util_pct")  # fmt: skip
    gpu = {**described["gpus"][0], "scope": scope.get("reason")}
    series: dict[str, Any] = {n: _series(thread.buffer, n) for n in names}
    series["timed"] = {n: _timed_series(thread.buffer, n) for n in ("energy_j", "power_w")}
    return series, gpu


def power_limit_w(index: int) -> float | None:
    """The enforced power limit of NVML's GPU ``index`` in watts, or None where NVML has none."""
    nvml = _nvml()
    try:
        nvml.nvmlInit()
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            return nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0
        finally:
            nvml.nvmlShutdown()
    except Exception:  # no NVML: the check says the limit is unknown
        return None


def check_nvml(_: object, name: str) -> Row:
    got = _sampled(name)
    if isinstance(got, Row):
        return got
    series, gpu = got
    energy, power = series["energy_j"], series["power_w"]
    sm, sm_source = series["sm_util_pct"], "GPM SM utilization"
    if not sm:
        sm = series["gpu_util_pct"]
        sm_source = f"NVML utilization rate ({gpu.get('gpm_reason') or 'no GPM SM reading'})"
    limit = power_limit_w(int(gpu["index"]))
    mean_w = sum(power) / len(power) if power else 0.0
    timed_energy, timed_power = series["timed"]["energy_j"], series["timed"]["power_w"]
    counted = integrated = 0.0
    if len(timed_energy) >= 2:
        (t0, e0), (t1, e1) = timed_energy[0], timed_energy[-1]
        counted, integrated = e1 - e0, integrated_energy_j(timed_power, t0, t1)
    agreement = abs(counted - integrated) / counted if counted > 0 else None
    checks = {
        "energy rising": len(energy) >= 2
        and energy[-1] > energy[0]
        and all(b >= a for a, b in itertools.pairwise(energy)),
        "mean power within limit": mean_w > 0
        and (limit is None or mean_w <= (1 + POWER_LIMIT_MARGIN) * limit),
        "energy counter matches integrated power": agreement is not None
        and agreement <= ENERGY_TOLERANCE,
        "SM active": bool(sm) and max(sm) >= MIN_SM_UTIL_PCT,
    }
    missing = [k for k, ok in checks.items() if not ok]
    figure = (
        f"energy +{counted:.0f} J (integrated power {integrated:.0f} J), power mean "
        f"{mean_w:.0f} W, max {max(power, default=0):.0f} W"
        + (f" (limit {limit:.0f} W)" if limit else "")
        if len(energy) >= 2 else f"{len(energy)} energy readings"
    )  # fmt: skip
    figure += f", SM {max(sm, default=0):.0f}% (>= {MIN_SM_UTIL_PCT:.0f}%)"
    detail = ("not met: " + ", ".join(missing) + "; " if missing else "") + (
        f"GPU {gpu['index']} {gpu['name']} ({gpu['scope']}); energy and power from NVML, "
        f"SM from {sm_source}; a moment over the limit is normal, its mean is judged"
    )
    return passed(name, not missing, figure, detail, **checks, power_limit_w=limit,
                  mean_power_w=mean_w, energy_counted_j=counted,
                  energy_integrated_j=integrated, energy_disagreement=agreement,
                  sm_source=sm_source, gpu_index=gpu["index"])  # fmt: skip


def _has_gpm(index: int) -> bool:
    nvml = _nvml()
    nvml.nvmlInit()
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        return bool(nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
    except nvml.NVMLError:
        return False
    finally:
        nvml.nvmlShutdown()


def check_gpm(_: object, name: str) -> Row:
    got = _sampled(name)
    if isinstance(got, Row):
        return got
    series, gpu = got
    if not _has_gpm(int(gpu["index"])):
        return skipped(name, f"GPU {gpu['index']} {gpu['name']} has no GPM (Hopper or newer)")
    tensor, dram = series["tensor_util_pct"], series["dram_bw_util_pct"]
    checks = {
        "tensor active": bool(tensor) and max(tensor) >= MIN_TENSOR_UTIL_PCT,
        "DRAM bandwidth": bool(dram) and max(dram) >= MIN_DRAM_BW_UTIL_PCT,
    }
    missing = [k for k, ok in checks.items() if not ok]
    figure = (
        f"tensor {max(tensor, default=0):.0f}% (>= {MIN_TENSOR_UTIL_PCT:.0f}%), DRAM "
        f"{max(dram, default=0):.0f}% (>= {MIN_DRAM_BW_UTIL_PCT:.0f}%)"
    )
    source = "GPM" if gpu.get("gpm") else f"none: {gpu.get('gpm_reason')}"
    detail = ("not met: " + ", ".join(missing) + "; " if missing else "") + (
        f"GPU {gpu['index']} ({gpu['scope']}); tensor and DRAM from {source}"
    )
    return passed(name, not missing, figure, detail, **checks, gpu_index=gpu["index"])
