"""The GPU check's lines in order, run one after another on cuda:0; each is a function of the
shared 8B reference (engine_checks.Reference) returning its Row. A check that raises is a MISS
naming the error; without a CUDA device every line is a SKIP with the reason.

Budgets (seconds on one H200, the most each line should take; the whole under 8 minutes):
the 8B reference (two warm engines' worth of runs) is paid by the first line that needs it.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from benchmarks.gpu_checks import device_checks, engine_checks, run_checks
from benchmarks.gpu_checks.rows import Row, skipped

# A check gets the shared 8B reference and its line's name (declared here only).
Check = Callable[[engine_checks.Reference, str], Row]

# (line, function, budget in seconds on an H200).
CHECKS: list[tuple[str, Check, float]] = [
    ("NVML/GPM readings during a matmul loop", device_checks.check_nvml, 10),
    ("engine logits: CUDA against CPU (tiny, fp32)", engine_checks.check_logits, 20),
    ("Llama-3-8B bf16 decode, batch 1: MBU", engine_checks.check_decode_batch_1, 60),
    ("Llama-3-8B bf16 decode, batch 32: MBU", engine_checks.check_decode_batch_32, 5),
    ("forward_s against CUDA-event truth", engine_checks.check_timing_truth, 5),
    ("fp8 KV cache against bf16", engine_checks.check_fp8_kv, 45),
    ("int8 weights against bf16", engine_checks.check_int8, 60),
    ("int4 weights against bf16", engine_checks.check_int4, 60),
    ("speculation with a draft model (8B target, 8B draft)", engine_checks.check_speculation, 45),
    ("cuda_graphs=True against False", engine_checks.check_cuda_graphs, 45),
    ("bench run with probes: GPU series, energy/token, MFU, MBU", run_checks.check_probed_run, 90),
    (
        "bench run --nsys: report in the run folder, prefill/decode NVTX ranges",
        run_checks.check_nsys,
        60,
    ),
]
TOTAL_BUDGET_S = 8 * 60


def no_cuda_reason() -> str | None:
    """Why this machine cannot run the checks, or None when it can."""
    if not torch.cuda.is_available():
        build = "a CPU build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
        return (
            f"no CUDA device: torch.cuda.is_available() is False (torch {torch.__version__}, "
            f"{build})"
        )
    return None


def device_meta() -> dict[str, Any]:
    """The machine the table was measured on."""
    meta: dict[str, Any] = {"torch": torch.__version__, "torch_cuda": torch.version.cuda}
    if torch.cuda.is_available():
        meta["device"] = torch.cuda.get_device_name(0)
        meta["device_count"] = torch.cuda.device_count()
    return meta


def run_checks(only: list[str] | None = None, log: Callable[[str], None] = print) -> list[Row]:
    """Every line's Row, in order (those whose name contains one of ``only``, when given)."""
    chosen = [c for c in CHECKS if not only or any(o.lower() in c[0].lower() for o in only)]
    reason = no_cuda_reason()
    if reason is not None:
        return [skipped(name, reason) for name, _, _ in chosen]
    torch.cuda.set_device(0)
    reference = engine_checks.Reference()
    rows = []
    for name, check, budget_s in chosen:
        t0 = time.perf_counter()
        try:
            row = check(reference, name)
        except Exception as exc:  # a failed check is a MISS that says why
            last = traceback.extract_tb(exc.__traceback__)[-1]
            row = Row(name, "MISS", detail=f"{type(exc).__name__}: {exc} "
                      f"({last.filename.rsplit('/', 1)[-1]}:{last.lineno})")  # fmt: skip
        seconds = time.perf_counter() - t0
        row = replace(row, seconds=seconds)
        log(f"{row.status} {name} ({seconds:.1f} s, budget {budget_s:.0f} s)")
        rows.append(row)
    return rows
