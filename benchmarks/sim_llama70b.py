"""Llama-3-70B on 4x A100-80GB (TP 4, BF16), simulated, beside the figures the seeds quote.

The seeds say: about 50 tokens/s for one user; 15-25 tokens/s per user at 100 users with
continuous batching and PagedAttention; about 5 without. This prints what the simulated device
(engine.sim.executor: the engine's real scheduler and KV cache, step times from the roofline with
published A100 efficiencies and NCCL's all-reduce model) predicts for:

- one user's decode tokens/s (1 closed-loop user),
- per-user TPS (1 / TPOT, p50) and TTFT (p50, p99) at 100 closed-loop users, continuous batching
  with paged KV, and static batching with contiguous KV (a reservation of the whole 8,192-token
  context per request), on two workloads: the lab's 100-users lengths (96-160 in, 96-160 out)
  and chat-like lengths (512-2,048 in, 128-512 out),
- the prefill time of one 4,096-token prompt (token budget 1,024 per step, chunked; and 8,192,
  one step).

    python benchmarks/sim_llama70b.py [--runs-dir DIR] [--step-overhead-ms MS]

No per-step host overhead is modelled unless given (none is published for a 70B server), so the
figures are what the GPUs allow; run folders land in a temporary directory unless --runs-dir.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.scenario.scenario import Scenario, load_scenario
from bench.sim.simulate import simulate
from engine.config import EngineConfig
from engine.core.request import SamplingParams
from engine.llm_engine import LLMEngine
from loadgen.workloads.spec import LengthDist

DEVICE: dict[str, Any] = {"model": "llama-3-70b", "gpu": "a100-80gb", "tp": 4}
WORKLOADS = {
    "lab 96-160/96-160": (LengthDist("uniform", low=96, high=160),
                          LengthDist("uniform", low=96, high=160)),
    "chat 512-2048/128-512": (LengthDist("uniform", low=512, high=2048),
                              LengthDist("uniform", low=128, high=512)),
}  # fmt: skip
MODES = {
    "continuous + paged": {},
    "static + contiguous": {"batching": "static", "kv_layout": "contiguous"},
}


def scenario(users: int, requests: int, lengths: tuple[LengthDist, LengthDist]) -> Scenario:
    base = load_scenario("100-users")
    return dataclasses.replace(
        base, name=f"sim-70b-{users}-users", users=users, num_requests=requests,
        input_len=lengths[0], output_len=lengths[1],
    )  # fmt: skip


def prefill_s(budget: int, overhead_ms: float | None) -> float:
    """Simulated time from a 4,096-token prompt's arrival to its first token, on an idle engine."""
    config = EngineConfig.from_flat(dict(**DEVICE, device="sim", sim_speedup=0.0,
                                         max_num_batched_tokens=budget,
                                         sim_step_overhead_ms=overhead_ms))  # fmt: skip
    engine = LLMEngine(config)
    engine.generate([[1000] * 4096], SamplingParams(max_tokens=1))
    return engine.clock_ns() / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-dir", type=Path, default=None)
    parser.add_argument("--step-overhead-ms", type=float, default=None)
    args = parser.parse_args()
    runs = args.runs_dir or Path(tempfile.mkdtemp(prefix="sim-70b-"))
    device = {**DEVICE, "sim_step_overhead_ms": args.step_overhead_ms}
    console = Console(width=132)
    table = Table(title="Llama-3-70B, 4x A100-80GB SXM, TP 4, BF16: simulated vs the seeds")
    for col in ("figure", "workload", "simulated", "seeds"):
        table.add_column(col, justify="right" if col != "figure" else "left")

    for name, lengths in WORKLOADS.items():
        _, one = simulate(scenario(1, 20, lengths), runs, device)
        tps = one["per_user_tps"]["p50"]
        table.add_row("1 user: decode tok/s (1/TPOT p50)", name, f"{tps:.1f}", "~50")
        for mode, switches in MODES.items():
            folder, s = simulate(scenario(100, 400, lengths), runs, {**device, **switches})
            seeds = "15-25" if mode.startswith("continuous") else "~5"
            table.add_row(f"100 users, {mode}: per-user TPS p50", name,
                          f"{s['per_user_tps']['p50']:.1f}", seeds)  # fmt: skip
            table.add_row(
                f"100 users, {mode}: TTFT p50 / p99 ms",
                name,
                f"{s['ttft_ms']['p50']:,.0f} / {s['ttft_ms']['p99']:,.0f}",
                "",
            )
            e2e_rate = s["tokens"]["output_tokens"] / 400 / (s["e2el_ms"]["mean"] / 1e3)
            table.add_row(
                f"100 users, {mode}: output tokens / E2EL (mean)", name, f"{e2e_rate:.1f}", ""
            )
            table.add_row(f"100 users, {mode}: output tok/s (all users)", name,
                          f"{s['throughput']['output_tok_s']:,.0f}", "")  # fmt: skip
            console.print(f"{name}, {mode}: {folder}")
    for budget in (1024, 8192):
        table.add_row(f"prefill of 4,096 tokens, budget {budget}/step (ms)", "1 prompt",
                      f"{prefill_s(budget, args.step_overhead_ms) * 1e3:,.0f}", "")  # fmt: skip
    console.print(table)


if __name__ == "__main__":
    main()
