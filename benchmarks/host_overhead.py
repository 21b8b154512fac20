"""Host overhead of the reference engine's decode step on the CPU: operators per layer, time.

On a GPU a decode step of the torch path (the one CUDA takes: `attention_backend=torch`,
`custom_ops=torch`) costs the host one dispatch per operator, whatever the batch; when the host
time exceeds the device time the step is host bound. This counts those operators where anyone
can: one engine on the CPU, a real-shaped model cut to a few layers, greedy decode steps under
torch.profiler, for each of the model's two layer paths side by side: the fused layers
(engine/model/fused_step.py, the default where they cover the model) and the plain layers of
engine/model/llama.py (`fused_layers = False`, the code before them).

    .venv/bin/python benchmarks/host_overhead.py                   # llama-3-8b and tiny shapes
    .venv/bin/python benchmarks/host_overhead.py --presets tiny --steps 40 --backends torch,auto

For each preset (cut to `--layers`, default 2 and 4, vocabulary cut to `--vocab`, float32),
backend choice and batch size it runs `--warmup` decode steps, then `--steps` steps of each
path under the profiler, then `--steps` timed steps of each, alternating path every step, and
prints per decode step and path:
  * ops/step: leaf `aten::` operators (an aten op that calls no other aten op) of one whole
    engine step, sampling and input preparation included;
  * ops/layer: the difference between the most and fewest layers' ops/step over the layer
    difference: what one more decoder layer costs, with nothing outside the layers left in;
  * ms/step and ms/layer: the fastest step's wall time (on a shared machine the one least
    disturbed by other work) and its difference per layer likewise; med ms/step: the median.
At `tiny` widths (hidden 256) a step computes almost nothing, so its ms/layer is the host's
cost of running one layer's operators; at llama-3-8b widths a float32 step is bound by reading
the weights. The vocabulary changes neither count: the sampler's ops do not depend on it.
With native kernels (`--backends auto` on a CPU that builds them) the fused layers do not run
and both rows are the plain layers.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import statistics
import time
from collections.abc import Iterable

import torch
from torch.autograd.profiler_util import FunctionEvent

from engine.config import EngineConfig
from engine.core.request import SamplingParams
from engine.llm_engine import LLMEngine
from perfmodel.presets import PRESETS, get_preset

PROMPT_LEN = 48
# KV cache memory per engine: bytes. Plenty for a few sequences of ~100 tokens at 8B widths.
KV_BYTES = 256 * 1024**2


def cut_preset(base: str, num_layers: int, vocab_size: int | None) -> str:
    """Register `base` cut to `num_layers` decoder layers (and `vocab_size`, if given) as a
    preset of this process; returns its name."""
    config = get_preset(base)
    vocab = vocab_size or config.vocab_size
    name = f"{base}-{num_layers}l-v{vocab}"
    PRESETS[name] = dataclasses.replace(
        config, name=name, num_hidden_layers=num_layers, vocab_size=vocab
    )
    return name


def leaf_aten_ops(events: Iterable[FunctionEvent]) -> int:
    """Profiler events named `aten::...` none of whose children is an `aten::` op."""
    return sum(
        1
        for e in events
        if e.name.startswith("aten::")
        and not any(c.name.startswith("aten::") for c in e.cpu_children)
    )


@dataclasses.dataclass(frozen=True)
class StepFigures:
    """One layer path's decode steps: leaf aten ops per step, the fastest and the median
    step's wall time (seconds)."""

    ops_per_step: float
    seconds_per_step: float
    median_seconds: float


PATHS = ("fused", "plain")


def measure(
    model: str, backend: str, batch: int, args: argparse.Namespace
) -> dict[str, StepFigures]:
    """Decode steps of `batch` greedy sequences on a fresh engine (`backend` sets both
    attention_backend and custom_ops), per layer path (PATHS)."""
    settings = {
        "model": model, "dtype": "float32", "device": "cpu", "seed": 0,
        "attention_backend": backend, "custom_ops": backend,
        "max_num_seqs": batch, "kv_cache_memory_bytes": KV_BYTES,
    }  # fmt: skip
    engine = LLMEngine(EngineConfig.from_flat(settings))
    llama = engine.executor.model  # type: ignore[attr-defined]
    vocab = engine.model_config.vocab_size
    # More tokens than the steps below take, so that no request finishes among them.
    total = args.warmup + 4 * args.steps + 8
    gen = torch.Generator().manual_seed(batch)
    for i in range(batch):
        prompt = torch.randint(3, vocab, (PROMPT_LEN,), generator=gen).tolist()
        params = SamplingParams(max_tokens=total, temperature=0.0, ignore_eos=True)
        engine.add_request(f"r{i}", prompt, params)
    while engine.last_stats is None or engine.last_stats.num_prefill_tokens:
        engine.step()  # the prompts, until a step decodes only
    for _ in range(args.warmup):
        for path in PATHS:
            llama.fused_layers = path == "fused"
            engine.step()
    ops = {}
    for path in PATHS:
        llama.fused_layers = path == "fused"
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(args.steps):
                engine.step()
        ops[path] = leaf_aten_ops(prof.events()) / args.steps
    times: dict[str, list[float]] = {path: [] for path in PATHS}
    for _ in range(args.steps):
        for path in PATHS:  # alternating, so that both see the same machine
            llama.fused_layers = path == "fused"
            start = time.perf_counter()
            engine.step()
            times[path].append(time.perf_counter() - start)
            stats = engine.last_stats
            done = None if stats is None else (stats.num_prefill_tokens, stats.num_decode_tokens)
            assert done == (0, batch), "every timed step decodes the whole batch"
    del engine, llama
    gc.collect()
    return {
        path: StepFigures(ops[path], min(times[path]), statistics.median(times[path]))
        for path in PATHS
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="llama-3-8b,tiny", help="comma list of presets")
    parser.add_argument("--layers", default="2,4", help="decoder layers, comma list (>= 2)")
    parser.add_argument("--vocab", type=int, default=32000, help="0: the preset's own")
    parser.add_argument("--batches", default="1,8", help="sequences per decode step")
    parser.add_argument(
        "--backends", default="torch", help="attention_backend and custom_ops: torch, auto, ..."
    )
    parser.add_argument("--steps", type=int, default=8, help="profiled steps (and timed ones)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (CPU shared)")
    args = parser.parse_args(argv)
    layers = sorted(int(n) for n in args.layers.split(","))
    if len(layers) < 2:
        parser.error("--layers needs two counts at least: per layer is their difference")
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, float32, {args.threads} thread(s), CPU")
    header = ["preset", "backends", "batch", "path", "layers", "ops/step", "ops/layer",
              "ms/step", "ms/layer", "med ms/step"]  # fmt: skip
    rows = []
    for base in args.presets.split(","):
        for backend in args.backends.split(","):
            for batch in (int(b) for b in args.batches.split(",")):
                figures = {
                    n: measure(cut_preset(base, n, args.vocab or None), backend, batch, args)
                    for n in layers
                }
                rows += _rows(base, backend, batch, figures)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))


def _rows(
    base: str, backend: str, batch: int, figures: dict[int, dict[str, StepFigures]]
) -> list[list[str]]:
    """Table rows of one preset, backend and batch: per path, per layer count."""
    layers = sorted(figures)
    span = layers[-1] - layers[0]
    rows = []
    for path in PATHS:
        few, many = figures[layers[0]][path], figures[layers[-1]][path]
        per_layer_ops = (many.ops_per_step - few.ops_per_step) / span
        per_layer_ms = 1e3 * (many.seconds_per_step - few.seconds_per_step) / span
        for n in layers:
            f = figures[n][path]
            rows.append([
                base, backend, str(batch), path, str(n), f"{f.ops_per_step:.1f}",
                f"{per_layer_ops:.1f}", f"{1e3 * f.seconds_per_step:.2f}", f"{per_layer_ms:.2f}",
                f"{1e3 * f.median_seconds:.2f}",
            ])  # fmt: skip
    return rows


if __name__ == "__main__":
    main()
