"""The engine on a CUDA device (`pytest -m gpu`; skipped, saying why, without one): logits
against the CPU, step times against CUDA events, fp8 KV and int8/int4 weights against bf16,
speculation with a draft model, CUDA graphs on against off. The tiny preset keeps each test
to seconds; benchmarks/gpu_check.py measures the same at Llama-3-8B shapes."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.gpu_checks.device_time import step_spans, timing_against_device
from benchmarks.gpu_checks.engine_checks import (
    TINY_LOGIT_TOLERANCE,
    check_logits,
    cuda_graphs_available,
)
from benchmarks.gpu_checks.engine_runs import GreedyRun, build, prompts, run_greedy, run_profiled
from benchmarks.gpu_checks.figures import logit_error
from benchmarks.gpu_checks.quality_checks import LOGIT_TOLERANCE

pytestmark = pytest.mark.gpu

TINY_CUDA = {"model": "tiny", "device": "cuda", "dtype": "bfloat16", "seed": 0,
             "max_model_len": 256, "kv_cache_memory_bytes": 64 * 2**20}  # fmt: skip


def _run(max_tokens: int = 8, capture: int = 0, **overrides: Any) -> GreedyRun:
    engine = build({**TINY_CUDA, **overrides})
    run_greedy(engine, prompts(2, 16, 4096, seed=9), 2)  # warm-up
    return run_greedy(engine, prompts(4, 32, 4096), max_tokens, capture_logits=capture)


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
    ("storage", "overrides"),
    [("fp8 KV cache", {"kv_cache_dtype": "fp8"}), ("int8 weights", {"quantization": "int8"}),
     ("int4 weights", {"quantization": "int4"})],
)  # fmt: skip
def test_lossy_storage_stays_near_bf16(storage: str, overrides: dict[str, Any]) -> None:
    base = _run(capture=1)
    got = _run(capture=1, **overrides)
    assert [len(t) for t in got.tokens] == [8] * 4
    # The prefill's logits: both engines saw the same inputs.
    assert logit_error(got.logits[0], base.logits[0]) <= LOGIT_TOLERANCE[storage]


def test_greedy_speculation_with_a_draft_model_gives_the_targets_tokens() -> None:
    base = _run(max_tokens=12)
    spec = _run(max_tokens=12, speculative="draft", draft_model="tiny", num_speculative_tokens=3,
                kv_cache_memory_bytes=None)  # fmt: skip
    assert spec.tokens == base.tokens


def test_cuda_graphs_give_the_same_tokens() -> None:
    why = cuda_graphs_available()
    if why is not None:
        pytest.skip(why)
    assert _run(cuda_graphs=True).tokens == _run(cuda_graphs=False).tokens
