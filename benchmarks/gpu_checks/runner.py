"""The GPU check's lines in order, run one after another on cuda:0; each is a function of the
shared 8B reference (engine_checks.Reference) returning its Row. A check that raises is a MISS
naming the error; without a usable CUDA device every line is a SKIP with torch's reason.

Budgets (seconds, the most each line may take; budget.py enforces them): the 8B reference
(warm engine runs at batches 1, 8 and 32) is paid by the first line that needs it, the CUDA
graphs runs by the first graph line. They sum to :data:`TOTAL_BUDGET_S`, the whole check's
deadline (7.5 minutes, under the 8 the GPU workflow allows); the budgets are estimates for one
H200, not yet measured there. A line given less than its budget by the deadline runs with
what is left; one that would get under a second is a MISS, not run.
"""

from __future__ import annotations

import gc
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from benchmarks.gpu_checks import device_checks, engine_checks, quality_checks, run_checks
from benchmarks.gpu_checks.budget import Deadline, OverBudget, line_budget
from benchmarks.gpu_checks.rows import Row, skipped
from benchmarks.gpu_checks.target import Target, find_target

# A check gets the shared 8B reference and its line's name (declared here only).
Check = Callable[[engine_checks.Reference, str], Row]

# (line, function, budget in seconds).
# fmt: off
CHECKS: list[tuple[str, Check, float]] = [
    ("NVML readings during a matmul loop: energy, power, SM", device_checks.check_nvml, 10),
    ("GPM readings during a matmul loop: tensor, DRAM", device_checks.check_gpm, 10),
    ("engine logits: CUDA against CPU (tiny, fp32)", engine_checks.check_logits, 20),
    ("Llama-3-8B bf16 decode, batch 1: MBU (eager)", engine_checks.check_decode_batch_1, 60),
    ("Llama-3-8B bf16 decode, batch 32: step against its roofline time",
     engine_checks.check_decode_batch_32, 5),
    ("Llama-3-8B bf16 decode, batch 1: MBU (CUDA graphs)",
     engine_checks.check_decode_batch_1_graphs, 45),
    ("cuda_graphs=True against False: float32 tokens, bf16 logits, speed",
     engine_checks.check_cuda_graphs, 40),
    ("forward_s against the profiler's device times", engine_checks.check_timing_truth, 30),
    ("fp8 KV cache: against its emulation, cost against bf16", quality_checks.check_fp8_kv, 50),
    ("int8 weights: against their emulation, cost against bf16", quality_checks.check_int8, 50),
    ("int4 weights: against their emulation, cost against bf16", quality_checks.check_int4, 50),
    ("speculation, draft = target (float32): acceptance, tokens",
     quality_checks.check_speculation, 60),
    ("bench run with probes: GPU series, energy/token, MFU, MBU", run_checks.check_probed_run, 70),
    ("bench run --nsys: report in the run folder, prefill/decode NVTX ranges",
     run_checks.check_nsys, 45),
]
# fmt: on
TOTAL_BUDGET_S = sum(budget for _, _, budget in CHECKS)


def device_meta(target: Target | None = None) -> dict[str, Any]:
    """The machine the table was measured on."""
    meta: dict[str, Any] = {"torch": torch.__version__, "torch_cuda": torch.version.cuda}
    if target is not None:
        meta["device"] = target.name + (" (MIG instance)" if target.mig else "")
        meta["device_memory_bytes"] = target.memory_bytes
        meta["nvml_scope"] = target.notes
    return meta


def run_line(check: Check, ref: engine_checks.Reference, name: str, budget_s: float) -> Row:
    """One line under its budget; what it started is killed when it ends."""
    t0 = time.perf_counter()
    try:
        with line_budget(budget_s):
            row = check(ref, name)
    except OverBudget as exc:
        row = Row(name, "MISS", detail=f"stopped: {exc}; what it started was killed")
    except Exception as exc:  # a failed check is a MISS that says why
        last = traceback.extract_tb(exc.__traceback__)[-1]
        row = Row(name, "MISS", detail=f"{type(exc).__name__}: {exc} "
                  f"({last.filename.rsplit('/', 1)[-1]}:{last.lineno})")  # fmt: skip
    gc.collect()  # an engine of the line holds reference cycles: its memory goes now
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return replace(row, seconds=time.perf_counter() - t0)


def run_checks(
    only: list[str] | None = None,
    on_row: Callable[[Row], None] = print,
    deadline_s: float = TOTAL_BUDGET_S,
    reason: str | None = None,
    reference: engine_checks.Reference | None = None,
) -> list[Row]:
    """Every line's Row, in order (those whose name contains one of ``only``, when given),
    each passed to ``on_row`` as it finishes; ``reason``: why there is no usable CUDA device
    (None: there is one). The whole stays within ``deadline_s`` (module docstring)."""
    chosen = [c for c in CHECKS if not only or any(o.lower() in c[0].lower() for o in only)]
    if reason is not None:
        rows = [skipped(name, reason) for name, _, _ in chosen]
        for row in rows:
            on_row(row)
        return rows
    if reference is None:
        reference = engine_checks.Reference(find_target())
    deadline = Deadline(deadline_s)
    rows: list[Row] = []

    def expired() -> None:  # the watchdog: the rows so far, the rest not run
        for name, _, _ in chosen[len(rows) :]:
            on_row(Row(name, "MISS", detail=f"not run: the check's deadline of {deadline_s:.0f} "
                       "s passed"))  # fmt: skip

    deadline.start(expired)
    try:
        for name, check, budget_s in chosen:
            left = min(budget_s, deadline.left_s())
            if left < 1.0:
                row = Row(name, "MISS", detail=f"not run: the check's deadline of "
                          f"{deadline_s:.0f} s left {max(left, 0):.1f} s")  # fmt: skip
            else:
                row = run_line(check, reference, name, left)
            rows.append(row)
            on_row(row)
    finally:
        deadline.stop()
    return rows
