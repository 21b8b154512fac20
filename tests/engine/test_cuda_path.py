"""The engine on a CUDA device (`pytest -m gpu`; skipped, saying why, without one): logits
against the CPU, step times against CUDA events, fp8 KV and int8/int4 weights against their
emulation (bench.experiments.switch_quality), speculation with a draft model and CUDA graphs
on against off in float32 (identical tokens; bf16 would round another batch shape apart). The
tiny preset keeps each test to seconds; benchmarks/gpu_check.py measures the same at
Llama-3-8B shapes."""

from __future__ import annotations

from typing import Any

import pytest

from bench.experiments.switch_quality import measure_switch_quality
from benchmarks.gpu_checks.device_time import step_spans, timing_against_device
from benchmarks.gpu_checks.engine_checks import (
    TINY_LOGIT_TOLERANCE,
    check_logits,
    cuda_graphs_available,
)
from benchmarks.gpu_checks.engine_runs import GreedyRun, build, prompts, run_greedy, run_profiled

pytestmark = pytest.mark.gpu

TINY_CUDA = {"model": "tiny", "device": "cuda", "dtype": "bfloat16", "seed": 0,
             "max_model_len": 256, "kv_cache_memory_bytes": 64 * 2**20}  # fmt: skip


def _run(max_tokens: int = 8, **overrides: Any) -> GreedyRun:
    engine = build({**TINY_CUDA, **overrides})
    run_greedy(engine, prompts(2, 16, 4096, seed=9), 2)  # warm-up
    return run_greedy(engine, prompts(4, 32, 4096), max_tokens)


def test_logits_on_cuda_match_the_cpu() -> None:
    row = check_logits(None, "logits")  # type: ignore[arg-type]
    assert row.values["tokens_identical"], row
    assert row.values["max_rel_logit_error"] <= TINY_LOGIT_TOLERANCE, row


def test_forward_s_agrees_with_the_devices_own_kernel_times() -> None:
    # Chunked prefill: the prompt chunks' steps sample nothing, the last chunk and decodes do.
    engine = build({**TINY_CUDA, "enable_chunked_prefill": True, "max_num_batched_tokens": 32})
    run_greedy(engine, prompts(2, 16, 4096, seed=9), 2)  # warm-up
    profiled = run_profiled(engine, prompts(2, 96, 4096), 8)
    spans = step_spans(profiled.trace, len(profiled.sampled))
    got = timing_against_device(profiled.run.steps["forward_s"].tolist(), spans, profiled.sampled)
    assert got["ok"], got


@pytest.mark.parametrize(
    "overrides",
    [{"kv_cache_dtype": "fp8"}, {"quantization": "int8"}, {"quantization": "int4"}],
    ids=["fp8-kv", "int8", "int4"],
)
def test_lossy_storage_matches_its_emulation(overrides: dict[str, Any]) -> None:
    got = measure_switch_quality(TINY_CUDA, overrides, prompts(4, 32, 4096), 8)
    assert got.right, got.reason


def test_greedy_speculation_with_a_draft_model_gives_the_targets_tokens() -> None:
    base = _run(max_tokens=12, dtype="float32")
    spec = _run(max_tokens=12, speculative="draft", draft_model="tiny", num_speculative_tokens=3,
                kv_cache_memory_bytes=None, dtype="float32")  # fmt: skip
    assert spec.tokens == base.tokens


def test_cuda_graphs_give_the_same_tokens() -> None:
    why = cuda_graphs_available()
    if why is not None:
        pytest.skip(why)
    on, off = (_run(cuda_graphs=g, dtype="float32") for g in (True, False))
    assert on.tokens == off.tokens
