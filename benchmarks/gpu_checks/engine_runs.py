"""One reference engine on the GPU, driven offline (LLMEngine.generate's loop), with CUDA-event
timing and logit capture around its executor: what the engine checks measure with.

The events are recorded on the current stream right before and right after each
``execute_model`` call that computes something, so their elapsed time is the GPU's own time
for the step, whatever the host clock saw; the engine records forward_s around the same call.
"""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch

from bench.run.endpoint.environment import cpu_name
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
    records of the batch (results.folder.engine_steps' table), each of those steps' CUDA-event time
    (seconds, same order), the logits of the first captured ``compute_logits`` calls (fp32,
    on the host) and the run's analytic section (results.figures.analytic), for MBU."""

    tokens: list[list[int]]
    steps: pd.DataFrame
    event_s: list[float]
    logits: list[np.ndarray] = field(default_factory=list)
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


def _timed_executor(engine: LLMEngine, events: list[tuple[Any, Any]]) -> Callable[[], None]:
    """Wrap the executor's execute_model with CUDA events; returns the undo."""
    runner = engine.executor
    inner = runner.execute_model

    def timed(sched: Any, block_tables: Any) -> Any:
        if sched.is_empty:  # the engine records no step for it either
            return inner(sched, block_tables)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = inner(sched, block_tables)
        end.record()
        events.append((start, end))
        return out

    runner.execute_model = timed  # type: ignore[method-assign]
    return lambda: setattr(runner, "execute_model", inner)


def _captured_logits(engine: LLMEngine, calls: int, into: list[np.ndarray]) -> Callable[[], None]:
    """Copy the first ``calls`` outputs of the model's compute_logits to the host (each copy
    waits for the GPU: capture only in runs that are not timed); returns the undo."""
    model = engine.executor.model  # type: ignore[attr-defined]
    inner = model.compute_logits

    def capture(hidden: torch.Tensor) -> torch.Tensor:
        logits = inner(hidden)
        if len(into) < calls:
            into.append(logits.float().cpu().numpy())
        return logits

    model.compute_logits = capture
    return lambda: setattr(model, "compute_logits", inner)


def run_greedy(
    engine: LLMEngine, batch: list[list[int]], max_tokens: int, capture_logits: int = 0
) -> GreedyRun:
    """Generate ``max_tokens`` greedy tokens (ignore_eos) for each prompt of ``batch`` at once;
    CUDA events time the steps of an engine on a GPU (``event_s`` is empty on the CPU)."""
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    first_step = engine.steps.num_steps
    events: list[tuple[Any, Any]] = []
    logits: list[np.ndarray] = []
    on_gpu = engine.device.type == "cuda"
    undo = [_timed_executor(engine, events)] if on_gpu else []
    if capture_logits:
        undo.append(_captured_logits(engine, capture_logits, logits))
    t0 = time.perf_counter()
    try:
        tokens = engine.generate(batch, params)
    finally:
        for restore in undo:
            restore()
    if on_gpu:
        torch.cuda.synchronize(engine.device)
    seconds = time.perf_counter() - t0
    steps = steps_frame(engine.steps.since(first_step), 0)
    gpus = [torch.cuda.get_device_name(engine.device)] if on_gpu else []
    analytic = analytic_section(engine.describe(), None, True, gpus, cpu_name())
    return GreedyRun(
        tokens=tokens,
        steps=steps,
        event_s=[start.elapsed_time(end) / 1e3 for start, end in events],
        logits=logits,
        analytic=analytic,
        seconds=seconds,
    )


def median_forward_s(steps: pd.DataFrame, phase: str) -> float | None:
    """The median forward_s of the pure ``phase`` ("prefill" or "decode") steps, seconds."""
    other = "num_decode_tokens" if phase == "prefill" else "num_prefill_tokens"
    own = "num_prefill_tokens" if phase == "prefill" else "num_decode_tokens"
    rows = steps[(steps[other] == 0) & (steps[own] > 0)]
    return float(rows["forward_s"].median()) if len(rows) else None
