"""Side-by-side timings of the weight-only quantized linear layers against the float one.

One run measures, for each weight shape and batch size (tokens per matmul), the float matmul
(`F.linear` in the model dtype) and the int8 / int4 layers of engine/model/quantization/linear.py
on the
kernel `probe_kernel` picks here (and, with --fallback, on the dequantize path), and prints
median milliseconds per call and the speed-up over float (float ms / quantized ms: > 1 is
faster). Batch 1 is a decode step of one sequence (memory bound: bytes of weight read per
token decide); batch 100 is a decode step of 100 sequences (towards compute bound).

    .venv/bin/python benchmarks/quant_matmul.py                    # tiny + 8B shapes, fp32
    .venv/bin/python benchmarks/quant_matmul.py --shapes tiny --dtype bfloat16 --fallback
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from engine.model.quantization.linear import (
    DEQUANT,
    Int4Linear,
    Int8Linear,
    KernelChoice,
    probe_kernel,
)

# (label, out_features N, in_features K) of one decoder layer's fused matrices.
SHAPES = {
    "tiny": [("tiny qkv_proj", 384, 256), ("tiny gate_up", 1408, 256), ("tiny down", 256, 704)],
    "8b": [("8b qkv_proj", 6144, 4096), ("8b gate_up", 28672, 4096), ("8b down", 4096, 14336)],
}


def median_ms(fn: Callable[[], torch.Tensor], min_time_s: float, max_reps: int) -> float:
    """Median wall time of fn() in milliseconds, after two warm-up calls."""
    for _ in range(2):
        fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_reps and (len(times) < 3 or time.perf_counter() - start < min_time_s):
        t0 = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return statistics.median(times)


def bench_shape(
    label: str, n: int, k: int, args: argparse.Namespace, dtype: torch.dtype
) -> list[list[str]]:
    gen = torch.Generator().manual_seed(0)
    weight = (torch.randn(n, k, generator=gen) * 0.02).to(dtype)
    device = torch.device("cpu")
    int8 = probe_kernel("int8", device, dtype, 0)
    int4 = probe_kernel("int4", device, dtype, args.group_size)
    layers: dict[str, torch.nn.Module] = {
        f"int8 {_short(int8.kernel)}": Int8Linear(weight, int8),
        f"int4 g{args.group_size} {_short(int4.kernel)}": Int4Linear(weight, args.group_size, int4),
    }
    if args.fallback:
        fallback = KernelChoice(DEQUANT, dtype, "forced")
        layers["int8 dequant"] = Int8Linear(weight, fallback)
        layers[f"int4 g{args.group_size} dequant"] = Int4Linear(weight, args.group_size, fallback)
    rows = []
    for batch in args.batches:
        x = torch.randn(batch, k, generator=gen).to(dtype)
        with torch.inference_mode():
            base = median_ms(lambda x=x: F.linear(x, weight), args.min_time_s, args.max_reps)
            rows.append([label, str(batch), "float", f"{base:.3f}", "1.00"])
            for name, layer in layers.items():
                ms = median_ms(lambda x=x, m=layer: m(x), args.min_time_s, args.max_reps)
                rows.append([label, str(batch), name, f"{ms:.3f}", f"{base / ms:.2f}"])
    return rows


def _short(kernel: str) -> str:
    return "dequant" if kernel == DEQUANT else kernel.removeprefix("torch.")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="tiny,8b", help="comma list of: tiny, 8b")
    parser.add_argument("--batches", default="1,100", help="tokens per matmul, comma list")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--group-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (CPU shared)")
    parser.add_argument("--min-time-s", type=float, default=0.3, help="per measurement")
    parser.add_argument("--max-reps", type=int, default=50)
    parser.add_argument("--fallback", action="store_true", help="also time the dequant path")
    args = parser.parse_args(argv)
    args.batches = [int(b) for b in args.batches.split(",")]
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    print(f"torch {torch.__version__}, {args.dtype}, {args.threads} thread(s), CPU")
    for method in ("int8", "int4"):
        group = args.group_size if method == "int4" else 0
        print(f"{method} kernel: {probe_kernel(method, torch.device('cpu'), dtype, group).reason}")
    header = ["shape [N x K]", "batch", "layer", "median ms", "speed-up vs float"]
    rows = []
    for group in args.shapes.split(","):
        for label, n, k in SHAPES[group]:
            rows += bench_shape(f"{label} [{n}x{k}]", n, k, args, dtype)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))


if __name__ == "__main__":
    main()
