"""What each engine optimization buys on this machine: the figures of the engine-switch issue,
each measured side by side in one run (one fresh reference engine per setting, same requests).

    python benchmarks/engine_switches.py [--runs-dir runs/switches] [--only NAME ...]

Prints one table per study and the ratios to its first setting; every run folder and
ablation.json stays under --runs-dir for `bench report` and the dashboards.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.experiments.ablate import Switch, render_ablation, run_ablation
from bench.scenario.scenario import Scenario, scenario_from_dict

# The tiny preset's KV bytes per token in float32: 2 (K, V) x 4 layers x 2 heads x 32 dims x 4 B.
_TINY_KV_BYTES_PER_TOKEN = 2 * 4 * 2 * 32 * 4


def _scenario(name: str, **overrides: Any) -> Scenario:
    base: dict[str, Any] = {
        "name": name,
        "users": 100,
        "num_requests": 300,
        "ignore_eos": True,
        "seed": 0,
        "input_len": {"kind": "uniform", "low": 96, "high": 160},
        "output_len": {"kind": "uniform", "low": 96, "high": 160},
    }
    base.update(overrides)
    return scenario_from_dict(base, source=f"benchmarks/engine_switches.py:{name}")


def studies() -> dict[str, tuple[Scenario, list[Switch]]]:
    kv_budget = 32_768 * _TINY_KV_BYTES_PER_TOKEN  # 32k token slots: 16 contiguous requests
    return {
        # Output lengths with a heavy tail: static batches wait for their longest member.
        "batching": (
            _scenario(
                "switch-batching",
                output_len={"kind": "pareto", "shape": 1.5, "scale": 20, "max": 1024},
            ),
            [Switch("batching", ("continuous", "static")), Switch("max_num_seqs", (100,))],
        ),
        # The same KV memory: how many requests run at once, and how much of it is wasted.
        "kv_layout": (
            _scenario("switch-kv-layout"),
            [
                Switch("kv_layout", ("paged", "contiguous")),
                Switch("kv_cache_memory_bytes", (kv_budget,)),
            ],
        ),
        # A 2,000-token system prompt shared by every request.
        "prefix_caching": (
            _scenario(
                "switch-prefix",
                users=16,
                num_requests=96,
                # 2,000 + up to 24 + 16 tokens stay inside the tiny preset's 2,048 context.
                input_len={"kind": "uniform", "low": 8, "high": 24},
                output_len={"kind": "fixed", "value": 16},
                shared_prefix={"tokens": 2000, "num_prefixes": 1, "share_ratio": 1.0},
            ),
            [Switch("enable_prefix_caching", (True, False))],
        ),
        # Greedy decoding of a random model repeats itself: n-gram lookup finds it.
        "ngram_repetitive": (
            _scenario("switch-ngram-greedy", users=8, num_requests=48),
            [Switch("speculative", ("off", "ngram"))],
        ),
        # Weight-only quantization: weight memory and speed, at one user and at 100.
        "quantization_1_user": (
            _scenario("switch-quant-1", users=1, num_requests=8),
            [Switch("quantization", ("none", "int8", "int4"))],
        ),
        "quantization_100_users": (
            _scenario("switch-quant-100"),
            [Switch("quantization", ("none", "int8", "int4"))],
        ),
        # Grouped-query attention: 8 query heads over 8 (MHA), 2 (GQA) or 1 (MQA) KV heads.
        "gqa": (
            _scenario("switch-gqa"),
            [Switch("model", ("tiny-mha", "tiny", "tiny-mqa"))],
        ),
        # Sampled at temperature 1, the same model does not repeat.
        "ngram_sampled": (
            _scenario("switch-ngram-sampled", users=8, num_requests=48, temperature=1.0),
            [Switch("speculative", ("off", "ngram"))],
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/switches"))
    parser.add_argument("--only", nargs="*", help="study names to run (default: all)")
    args = parser.parse_args()
    console = Console(width=160)
    chosen = studies()
    if args.only:
        chosen = {k: v for k, v in chosen.items() if k in args.only}
    results = {}
    for name, (scenario, switches) in chosen.items():
        console.rule(f"[bold]{name}")
        path = run_ablation(scenario, switches, args.runs_dir, console, live=False)
        render_ablation(path, console)
        results[name] = str(path)
    (args.runs_dir / "switches.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
