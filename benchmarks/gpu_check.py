"""Prove the GPU path on one GPU: one table, one line per check, PASS, MISS or SKIP.

    python benchmarks/gpu_check.py [--require-gpu] [--json FILE|-] [--only NAME ...]
                                   [--deadline SECONDS]

The lines (benchmarks/gpu_checks/runner.py): NVML readings (energy, power, SM) and GPM's
(tensor, DRAM) during a matmul loop, on the GPU this process's cuda:0 is; the engine's logits
on CUDA against the CPU (tiny, fp32); Llama-3-8B-shaped random bf16 decode: batch-1 MBU
(target >= 0.75) eager and with CUDA graphs, batch 32 within 2x its roofline time; CUDA graphs
on against off (float32 tokens, bf16 logits, speed); forward_s against torch.profiler's device
times, on steps that sample and steps that do not, with the host's share of a step; fp8 KV,
int8 and int4 against their emulation, their cost against bf16 (slower is expected where the
engine refused the kernel); speculation in float32 with a draft that is the target (acceptance
~100%, the target's tokens); a short `bench run` with
probes (GPU series, energy per token, MFU, MBU); `bench run --nsys` where nsys exists.

Each line is printed as it finishes, under its own budget (what it started is killed when it
runs over), the whole under an explicit deadline (545 s by default, --deadline). On a
MIG instance the roofs and KV budgets are scaled to the slice, and what does not fit is
skipped with what it needs. Exit status: 0 when no line is a MISS, 1 when one is; without a
usable CUDA device every line is SKIP with torch's reason and the status is 0, or 3 under
--require-gpu (what the GPU workflow runs).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the checks are benchmarks.gpu_checks
    sys.path.insert(0, str(ROOT))

from benchmarks.gpu_checks.engine_checks import Reference  # noqa: E402
from benchmarks.gpu_checks.rows import render_line, render_table, to_json  # noqa: E402
from benchmarks.gpu_checks.runner import TOTAL_BUDGET_S, device_meta, run_checks  # noqa: E402
from benchmarks.gpu_checks.target import find_target, no_cuda_reason  # noqa: E402

NO_GPU_EXIT = 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON ('-': stdout)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="lines whose name contains NAME")
    parser.add_argument(
        "--require-gpu",
        action="store_true",
        help=f"exit {NO_GPU_EXIT} when no CUDA device is usable, naming why",
    )
    parser.add_argument(
        "--deadline",
        type=float,
        default=TOTAL_BUDGET_S,
        metavar="SECONDS",
        help=f"the whole check's deadline (default {TOTAL_BUDGET_S:.0f})",
    )
    args = parser.parse_args(argv)
    if args.deadline <= 0:
        parser.error(f"--deadline {args.deadline}: give a positive number of seconds")
    t0 = time.perf_counter()
    reason = no_cuda_reason()
    if reason is not None and args.require_gpu:
        print(f"gpu_check: --require-gpu: {reason}", file=sys.stderr)
        return NO_GPU_EXIT
    target = find_target() if reason is None else None  # the context exists: NVML lists it
    rows = run_checks(args.only, lambda row: print(render_line(row), flush=True),
                      args.deadline, reason, Reference(target))  # fmt: skip
    meta = {**device_meta(target), "seconds": round(time.perf_counter() - t0, 1)}
    title = f"GPU check: {meta.get('device', 'no CUDA device')}, {meta['seconds']:.0f} s"
    print(render_table(rows, title))
    if args.json == "-":
        print(to_json(rows, meta))
    elif args.json:
        Path(args.json).write_text(to_json(rows, meta) + "\n")
    return 1 if any(r.status == "MISS" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
