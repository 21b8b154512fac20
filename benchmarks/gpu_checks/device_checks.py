"""NVML and GPM readings during a matmul loop: the GPU probe's figures are sane where the
load is known. The loop alternates bf16 matmuls (tensor cores) with large copies (DRAM) on
cuda:0 for :data:`LOAD_S` seconds while the project's NVML sampler (probes.nvml) ticks."""

from __future__ import annotations

import itertools
import time
from typing import Any

import torch

from benchmarks.gpu_checks.rows import Row, passed
from probes.nvml import NvmlSampler
from probes.sampler import SamplerThread

LOAD_S = 4.0
SAMPLE_INTERVAL_S = 0.2
# What "busy" must read during the loop (percent of the part's peak, or of the sample period).
MIN_SM_UTIL_PCT = 50.0
MIN_TENSOR_UTIL_PCT = 5.0
MIN_DRAM_BW_UTIL_PCT = 10.0


def _load(device: torch.device, seconds: float) -> None:
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


def _series(buffer: Any, name: str) -> list[float]:
    """The readings of ``name`` of the first GPU that has them (cuda:0 is the loaded one when
    it is the only GPU; on a node of several, pin the check with CUDA_VISIBLE_DEVICES)."""
    cols = buffer.columns()
    found = [(v, lab) for n, v, lab in zip(cols["name"], cols["value"], cols["labels"],
                                           strict=True) if n == name]  # fmt: skip
    return [v for v, lab in found if lab == found[0][1]] if found else []


def power_limit_w(index: int = 0) -> float | None:
    """The enforced power limit of GPU ``index`` in watts (NVML), or None where NVML has none."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            return pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML: the check says the limit is unknown
        return None


def check_nvml(_: object, name: str) -> Row:
    thread = SamplerThread(NvmlSampler(SAMPLE_INTERVAL_S))
    reason = thread.start()
    if reason is not None:
        return Row(name, "MISS", detail=f"the NVML sampler did not start: {reason}")
    try:
        _load(torch.device("cuda:0"), LOAD_S)
    finally:
        thread.stop()
    buf = thread.buffer
    energy = _series(buf, "energy_j")
    power = _series(buf, "power_w")
    sm, tensor, dram = (
        _series(buf, "sm_util_pct"), _series(buf, "tensor_util_pct"),
        _series(buf, "dram_bw_util_pct"),
    )  # fmt: skip
    limit = power_limit_w()
    checks = {
        "energy rising": len(energy) >= 2
        and energy[-1] > energy[0]
        and all(b >= a for a, b in itertools.pairwise(energy)),
        "power within limit": bool(power)
        and max(power) > 0
        and (limit is None or max(power) <= 1.05 * limit),
        "SM active": bool(sm) and max(sm) >= MIN_SM_UTIL_PCT,
        "tensor active": bool(tensor) and max(tensor) >= MIN_TENSOR_UTIL_PCT,
        "DRAM bandwidth": bool(dram) and max(dram) >= MIN_DRAM_BW_UTIL_PCT,
    }
    missing = [k for k, ok in checks.items() if not ok]
    figure = (
        f"energy +{energy[-1] - energy[0]:.0f} J, power max {max(power, default=0):.0f} W"
        f" (limit {limit:.0f} W)"
        if energy and limit
        else f"{len(energy)} energy readings"
    )
    figure += (
        f", SM {max(sm, default=0):.0f}%, tensor {max(tensor, default=0):.0f}%, DRAM "
        f"{max(dram, default=0):.0f}%"
    )
    gpm = thread.sampler.describe()["gpus"][0] if thread.sampler.describe()["gpus"] else {}
    detail = "not met: " + ", ".join(missing) if missing else f"{len(energy)} ticks"
    if not gpm.get("gpm"):
        detail += f"; GPM off: {gpm.get('gpm_reason')}"
    return passed(name, not missing, figure, detail, **checks, power_limit_w=limit)
