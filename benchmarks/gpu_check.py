"""Prove the GPU path on one GPU: one table, one line per check, PASS, MISS or SKIP.

    python benchmarks/gpu_check.py [--json FILE|-] [--only NAME ...]

The lines (benchmarks/gpu_checks/runner.py): NVML and GPM readings sane during a matmul loop;
the engine's logits on CUDA against the CPU (tiny, fp32); Llama-3-8B-shaped random bf16 decode
at batch 1 and 32 with MBU against the part's roof (target >= 0.75 at batch 1); forward_s
against CUDA-event truth within 2%; fp8 KV, int8 and int4 against bf16 (logit error, step time);
speculation with a draft model; cuda_graphs on against off; a short `bench run` with probes
(GPU series, energy per token, MFU, MBU); `bench run --nsys` where nsys exists. Budgeted to
stay under 8 minutes on one H200 (each line's budget is in the runner). Without a CUDA device
every line is SKIP with the reason, and the exit code is 0; with one, 1 when a line is MISS.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the checks are benchmarks.gpu_checks
    sys.path.insert(0, str(ROOT))

from benchmarks.gpu_checks.rows import render_table, to_json  # noqa: E402
from benchmarks.gpu_checks.runner import device_meta, run_checks  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON ('-': stdout)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="lines whose name contains NAME")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    rows = run_checks(args.only, log=lambda line: print(line, file=sys.stderr, flush=True))
    meta = {**device_meta(), "seconds": round(time.perf_counter() - t0, 1)}
    title = f"GPU check: {meta.get('device', 'no CUDA device')}, {meta['seconds']:.0f} s"
    print(render_table(rows, title))
    if args.json == "-":
        print(to_json(rows, meta))
    elif args.json:
        Path(args.json).write_text(to_json(rows, meta) + "\n")
    return 1 if any(r.status == "MISS" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
