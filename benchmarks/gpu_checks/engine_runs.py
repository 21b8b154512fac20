"""One reference engine on the GPU, driven offline (LLMEngine.generate's loop), with
torch.profiler around its executor for the timing line: what the engine checks measure with.

The profiled run wraps each ``execute_model`` call that computes something in a range named
``device_time.STEP_MARK#i`` and notes whether it sampled (returned tokens); the profiler's own
trace, not the engine's clock, then says when the step's device work ended (device_time).
"""

from __future__ import annotations

import gc
import json
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch

from bench.run.endpoint.environment import cpu_name
from benchmarks.gpu_checks.device_time import STEP_MARK
from engine.config import EngineConfig
from engine.core.request import SamplingParams
from engine.llm_engine import LLMEngine
from results.figures.analytic import analytic_section
from results.folder.engine_steps import steps_frame

# Settings every 8B engine of the checks shares: a fixed KV budget (the default takes 90% of
# free memory, seconds to allocate, and leaves none for the next engine) and a short context.
LLAMA_8B = {
    "model": "llama-3-8b",
    "device": "cuda",
    "dtype": "bfloat16",
    "seed": 0,
    "max_model_len": 1024,
    "kv_cache_memory_bytes": 8 * 2**30,
}


def prompts(num_seqs: int, prompt_tokens: int, vocab_size: int, seed: int = 0) -> list[list[int]]:
    """``num_seqs`` prompts of ``prompt_tokens`` random token ids (no special tokens: ids from
    3 up), the same for every engine of a comparison."""
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab_size) for _ in range(prompt_tokens)] for _ in range(num_seqs)]


@dataclass
class GreedyRun:
    """What one greedy batch through an engine gave: each sequence's tokens, the engine's step
    records of the batch (results.folder.engine_steps' table) and the run's analytic section
    (results.figures.analytic, its roofs scaled to a MIG instance by ``gpu_scope``), for MBU.
    (Logits: bench.experiments.forced_runs.greedy_logits.)"""

    tokens: list[list[int]]
    steps: pd.DataFrame
    analytic: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


def build(settings: dict[str, Any]) -> LLMEngine:
    """An LLMEngine of ``settings`` (EngineConfig.from_flat's flat names), after handing back
    the GPU memory of engines no longer referenced (an engine holds reference cycles, so only
    a collection frees it), so that each starts from an empty GPU and a default KV budget sees
    all of the memory."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return LLMEngine(EngineConfig.from_flat(settings))


def _profiled_executor(engine: LLMEngine, sampled: list[bool]) -> Callable[[], None]:
    """Wrap the executor's execute_model in one profiler range per step that computes (the
    steps the engine records), noting whether it sampled; returns the undo."""
    runner = engine.executor
    inner = runner.execute_model

    def profiled(sched: Any, block_tables: Any) -> Any:
        if sched.is_empty:  # the engine records no step for it either
            return inner(sched, block_tables)
        with torch.profiler.record_function(f"{STEP_MARK}#{len(sampled)}"):
            out = inner(sched, block_tables)
        sampled.append(bool(out))
        return out

    runner.execute_model = profiled  # type: ignore[method-assign]
    return lambda: setattr(runner, "execute_model", inner)


def run_greedy(
    engine: LLMEngine, batch: list[list[int]], max_tokens: int,
    gpu_scope: dict[str, Any] | None = None,
) -> GreedyRun:  # fmt: skip
    """Generate ``max_tokens`` greedy tokens (ignore_eos) for each prompt of ``batch`` at once;
    ``gpu_scope``: the check's Target scope (probes.gpu_scope JSON), for a MIG instance's roofs."""
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    first_step = engine.steps.num_steps
    on_gpu = engine.device.type == "cuda"
    t0 = time.perf_counter()
    tokens = engine.generate(batch, params)
    if on_gpu:
        torch.cuda.synchronize(engine.device)
    seconds = time.perf_counter() - t0
    steps = steps_frame(engine.steps.since(first_step), 0)
    gpus = [torch.cuda.get_device_name(engine.device)] if on_gpu else []
    analytic = analytic_section(engine.describe(), None, True, gpus, cpu_name(),
                                gpu_scope=gpu_scope if on_gpu else None)  # fmt: skip
    return GreedyRun(tokens, steps, analytic, seconds)


@dataclass
class ProfiledRun:
    """A greedy run under torch.profiler: the run, the profiler's chrome trace (loaded JSON)
    and, per recorded step in order, whether it sampled."""

    run: GreedyRun
    trace: dict[str, Any]
    sampled: list[bool]


def run_profiled(engine: LLMEngine, batch: list[list[int]], max_tokens: int) -> ProfiledRun:
    """:func:`run_greedy` under torch.profiler (CPU activity, and CUDA's on a GPU)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if engine.device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    sampled: list[bool] = []
    undo = _profiled_executor(engine, sampled)
    try:
        with torch.profiler.profile(activities=activities) as prof:
            run = run_greedy(engine, batch, max_tokens)
    finally:
        undo()
    with tempfile.TemporaryDirectory(prefix="gpu-check-trace-") as tmp:
        path = f"{tmp}/trace.json"
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as fh:
            trace = json.load(fh)
    return ProfiledRun(run, trace, sampled)


def median_forward_s(steps: pd.DataFrame, phase: str) -> float | None:
    """The median forward_s of the pure ``phase`` ("prefill" or "decode") steps, seconds."""
    other = "num_decode_tokens" if phase == "prefill" else "num_prefill_tokens"
    own = "num_prefill_tokens" if phase == "prefill" else "num_decode_tokens"
    rows = steps[(steps[other] == 0) & (steps[own] > 0)]
    return float(rows["forward_s"].median()) if len(rows) else None
