"""Packed quantized kernels timed against the float matmul at start, refused where slower.

`probe_kernel` (engine/model/quantization/linear.py) keeps a packed kernel that is correct. Correct
is
not fast: torch's `_weight_int8pack_mm` CUDA kernel is a plain loop, far slower than a bf16
GEMM at prefill sizes, and the CPU int8/int4 kernels measured about 2x slower than the fp32
matmul at 256 rows here, while 2-3x faster at one row. So, once per (method, device, dtype,
group size), `limit_to_faster_sizes` times the kernel against the float matmul in the model's
dtype, on a synthetic weight, at row counts (tokens per call) from a decode size up to a
prefill size, in increasing order, and stops at the first size where the kernel is slower:
  * slower already at the smallest size: the kernel is refused, every call dequantizes and
    multiplies in the model's dtype (`DEQUANT`);
  * slower from some size on: calls of more rows than the last faster size dequantize there
    (`KernelChoice.max_packed_rows`); decode-sized calls keep the kernel;
  * never slower: the kernel runs at every size.
The refusal is one line (`KernelChoice.refused`), logged by `quantize_model` and kept in its
report (`QuantReport.refused`, in `LLMEngine.describe()`: `/debug/engine` and run.json). The
timer can be injected (tests force a "slower" outcome).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import replace

import torch
from torch import nn

from engine.model.quantization.linear import (
    DEQUANT,
    Int4Linear,
    Int8Linear,
    KernelChoice,
    probe_kernel,
)

# Row counts timed, a decode size first, a prefill size last; and the [out, in] weight shape
# (Llama-3-8B's hidden size on CUDA; smaller on a CPU, where one 4096^2 prefill call alone
# takes about a second).
TIMED_ROWS = {"cuda": (1, 8, 32, 128, 512, 2048), "cpu": (1, 4, 16, 64, 256)}
TIMED_SHAPE = {"cuda": (4096, 4096), "cpu": (2048, 1024)}

# Milliseconds one call of `layer` on `x` takes.
Timer = Callable[[nn.Module, torch.Tensor], float]


def best_ms(layer: nn.Module, x: torch.Tensor, reps: int = 5) -> float:
    """The fastest of ``reps`` calls of layer(x), in milliseconds, after one warm-up call,
    synchronising a CUDA device around each. The minimum, not the median: on a shared machine
    other work only ever adds time, and the choice must not follow the noise."""

    def sync() -> None:
        if x.device.type == "cuda":
            torch.cuda.synchronize(x.device)

    with torch.no_grad():
        layer(x)
        best = float("inf")
        for _ in range(reps):
            sync()
            start = time.perf_counter_ns()
            layer(x)
            sync()
            best = min(best, (time.perf_counter_ns() - start) / 1e6)
    return best


def limit_to_faster_sizes(
    choice: KernelChoice,
    method: str,
    device: torch.device,
    dtype: torch.dtype,
    group_size: int,
    timer: Timer = best_ms,
) -> KernelChoice:
    """``choice`` (a probed kernel) limited to the sizes where it beats the ``dtype`` float
    matmul (module docstring); ``choice`` itself if it is already the dequantize path."""
    if choice.kernel == DEQUANT:
        return choice
    kind = "cuda" if device.type == "cuda" else "cpu"
    out_features, in_features = TIMED_SHAPE[kind]
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(out_features, in_features, generator=gen) * 0.02
    float_layer = nn.Linear(in_features, out_features, bias=False, device=device, dtype=dtype)
    with torch.no_grad():
        float_layer.weight.copy_(weight)
    weight = weight.to(device)
    packed: nn.Module = (
        Int8Linear(weight, choice) if method == "int8" else Int4Linear(weight, group_size, choice)
    )
    name, last_faster = _name(dtype), None
    for rows in TIMED_ROWS[kind]:
        x = torch.randn(rows, in_features, generator=gen).to(device=device, dtype=dtype)
        kernel_ms, float_ms = timer(packed, x), timer(float_layer, x)
        if kernel_ms <= float_ms:
            last_faster = rows
            continue
        timing = (
            f"{kernel_ms:.3f} ms against {float_ms:.3f} ms for the {name} matmul at {rows} rows"
        )
        if last_faster is None:
            line = (
                f"{choice.kernel} refused, slower than {name} ({timing}): "
                f"dequantize+matmul in {name}"
            )
            return KernelChoice(DEQUANT, dtype, line, refused=line)
        line = (
            f"{choice.kernel} refused above {last_faster} rows, slower than {name} ({timing}): "
            f"dequantize+matmul in {name} there"
        )
        return replace(
            choice, max_packed_rows=last_faster, reason=f"{choice.reason}; {line}", refused=line
        )
    sizes = TIMED_ROWS[kind]
    return replace(
        choice,
        reason=f"{choice.reason}; faster than {name} at {sizes[0]} to {sizes[-1]} rows",
    )


@functools.lru_cache(maxsize=32)
def timed_kernel(
    method: str, device: torch.device, dtype: torch.dtype, group_size: int
) -> KernelChoice:
    """`probe_kernel`'s choice limited by the timing above, with the real timer. Cached: one
    timing per process and setting."""
    choice = probe_kernel(method, device, dtype, group_size)
    return limit_to_faster_sizes(choice, method, device, dtype, group_size)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
