"""`bench calibrate`: measure this machine's matmul FLOP/s per dtype and stream-triad bandwidth.

A CPU has no datasheet roof worth plotting, so a CPU run's roofline uses these measurements (and a
GPU's can be compared with its datasheet). Each figure is the best of repeated timings within a
time budget: a roof is what the machine can reach, not what it reaches on average.

- matmul: C = A @ B with square n x n operands, 2 * n^3 FLOPs each, with torch's intra-op threads
  (recorded); fp32 and bf16 on the CPU; fp32 (TF32 off), bf16 and fp16 on a GPU.
- triad: a = b + s * c over float32 arrays far larger than the caches (McCalpin's STREAM triad, one
  fused torch.add), counting 3 arrays * 4 bytes per element as STREAM does (no write-allocate).

The result is saved and read by perfmodel.calibration, which also declares the budgets of a full
and a quick calibration (``mode``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import torch

from perfmodel.calibration import FULL_BUDGET_S
from perfmodel.files import JSONObject

__all__ = ["calibrate", "device_sync", "measure_matmul", "measure_triad"]

CPU_MATMUL_DTYPES = ("fp32", "bf16")
GPU_MATMUL_DTYPES = ("fp32", "bf16", "fp16")
_TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def _best_rate(
    run: Callable[[], Any], work: float, budget_s: float, sync: Callable[[], None]
) -> tuple[float, int]:
    """Best work/second over repeated timed calls of ``run`` within ``budget_s`` (>= 3 calls,
    after one warm-up call)."""
    run()
    sync()
    best_s = float("inf")
    deadline = time.perf_counter() + budget_s
    calls = 0
    while calls < 3 or time.perf_counter() < deadline:
        t0 = time.perf_counter()
        run()
        sync()
        best_s = min(best_s, time.perf_counter() - t0)
        calls += 1
    return work / best_s, calls


def device_sync(device: str) -> Callable[[], None]:
    """A wait for the work queued on ``device`` (a no-op on the CPU, which runs ops eagerly).

    ``torch.cuda.synchronize()`` without a device waits on the *current* device only (cuda:0
    unless set), so timing cuda:1..N with it would stop the clock before their kernels ran.
    """
    target = torch.device(device)
    if target.type == "cpu":
        return lambda: None
    return lambda: torch.cuda.synchronize(target)


def measure_matmul(dtype: str, n: int, budget_s: float, device: str = "cpu") -> JSONObject:
    """Achieved FLOP/s of an n x n x n matmul in ``dtype`` on ``device``."""
    torch_dtype = getattr(torch, _TORCH_DTYPES[dtype])
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, generator=gen, device=device).to(torch_dtype)
    b = torch.randn(n, n, generator=gen, device=device).to(torch_dtype)
    out = torch.empty(n, n, dtype=torch_dtype, device=device)
    sync = device_sync(device)
    rate, calls = _best_rate(lambda: torch.mm(a, b, out=out), 2.0 * n**3, budget_s, sync)
    return {"flops_per_s": rate, "n": n, "calls": calls}


def measure_triad(num_elements: int, budget_s: float, device: str = "cpu") -> JSONObject:
    """Achieved bytes/s of a = b + s * c over float32 arrays of ``num_elements``."""
    b = torch.ones(num_elements, device=device)
    c = torch.full((num_elements,), 2.0, device=device)
    a = torch.empty(num_elements, device=device)
    sync = device_sync(device)
    work = 3.0 * 4 * num_elements
    rate, calls = _best_rate(lambda: torch.add(b, c, alpha=3.0, out=a), work, budget_s, sync)
    return {"bytes_per_s": rate, "array_bytes": 4 * num_elements, "calls": calls}


def calibrate(
    budget_s: float = FULL_BUDGET_S,
    cpu_matmul_n: int = 1024,
    cpu_triad_elements: int = 32 * 2**20,
    gpu: bool = True,
    host: JSONObject | None = None,
    mode: str = "full",
) -> JSONObject:
    """Measure the CPU (and every CUDA GPU when ``gpu``); ``budget_s`` seconds per figure.

    ``mode`` ("full" or "quick", perfmodel.calibration) is recorded as given.

    ``host`` (e.g. the CPU's model name) is stored as given, to tell later readers which machine
    the figures belong to.
    """
    cpu: JSONObject = {"matmul_flops_per_s": {}, "matmul": {}}
    for dtype in CPU_MATMUL_DTYPES:
        m = measure_matmul(dtype, cpu_matmul_n, budget_s)
        cpu["matmul_flops_per_s"][dtype] = m["flops_per_s"]
        cpu["matmul"][dtype] = m
    triad = measure_triad(cpu_triad_elements, budget_s)
    cpu.update(triad_bytes_per_s=triad["bytes_per_s"], triad=triad)
    result: JSONObject = {
        "version": 1,
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": {**(host or {}), "cpu_count_logical": os.cpu_count()},
        "torch": torch.__version__,
        "num_threads": torch.get_num_threads(),
        "mode": mode,
        "budget_s": budget_s,
        "cpu": cpu,
        "gpus": [],
    }
    if gpu and torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32
        for index in range(torch.cuda.device_count()):
            result["gpus"].append(_calibrate_gpu(index, budget_s))
    return result


def _calibrate_gpu(index: int, budget_s: float) -> JSONObject:
    device = f"cuda:{index}"
    props = torch.cuda.get_device_properties(index)
    entry: JSONObject = {"index": index, "name": props.name, "memory_bytes": props.total_memory}
    entry["matmul_flops_per_s"] = {
        dtype: measure_matmul(dtype, 8192, budget_s, device)["flops_per_s"]
        for dtype in GPU_MATMUL_DTYPES
    }
    # 4 x 256 Mi float32 = 1 GiB per array: far beyond any GPU's L2.
    entry["triad_bytes_per_s"] = measure_triad(256 * 2**20, budget_s, device)["bytes_per_s"]
    return entry
