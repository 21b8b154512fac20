"""Teacher-forced runs and the rules that judge a switch (bench/experiments/forced_runs.py,
switch_quality.py), on the tiny preset; tests/engine/test_switch_numerics.py holds every switch
to them at real shapes."""

from __future__ import annotations

from typing import Any

import pytest

from bench.experiments.forced_runs import LogitComparison, greedy_logits
from bench.experiments.switch_quality import (
    EMULATION_SHARE,
    ROUNDING_16BIT,
    judge,
    judged_settings,
    measure_switch_quality,
    quality_prompts,
)
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine

TINY: dict[str, Any] = {"model": "tiny", "device": "cpu", "dtype": "float32", "seed": 0,
                        "max_model_len": 128, "enable_prefix_caching": False}  # fmt: skip


def test_a_forced_run_feeds_the_given_tokens_and_keeps_every_steps_logits() -> None:
    engine = LLMEngine(EngineConfig.from_flat(TINY))
    prompts = quality_prompts(512)[:2]
    free = greedy_logits(engine, prompts, 5)
    assert [len(t) for t in free.tokens] == [5, 5]
    assert [rows.shape for rows in free.logits] == [(5, 4096), (5, 4096)]
    assert free.chooses(free.tokens)  # greedy: each token is its step's argmax
    forced_tokens = [[7, 8, 9, 10, 11], [12, 13, 14, 15, 16]]
    forced = greedy_logits(engine, prompts, 5, forced=forced_tokens)
    assert forced.tokens == forced_tokens
    # The first step saw the same prompt: the same logits; later steps other contexts.
    assert (forced.logits[0][0] == free.logits[0][0]).all()
    assert not forced.chooses(forced_tokens)
    with pytest.raises(ValueError, match="2 continuations of 5 tokens"):
        greedy_logits(engine, prompts, 5, forced=[[1, 2]])


def test_the_rules() -> None:
    same, off = LogitComparison(0.0, 1.0, 8), LogitComparison(0.04, 0.9, 8)
    assert judge("exact", "float32", True, same, None)[0]
    assert not judge("exact", "float32", False, same, None)[0]
    assert not judge("exact", "float32", True, LogitComparison(1e-3, 1.0, 8), None)[0]
    # bf16: a flipped near tie is rounding while the logits stay within the bound.
    assert judge("exact", "bfloat16", False, LogitComparison(0.02, 0.9, 8), None)[0]
    assert not judge("exact", "bfloat16", True,
                     LogitComparison(2 * ROUNDING_16BIT, 0.9, 8), None)[0]  # fmt: skip
    near = LogitComparison(EMULATION_SHARE * 0.04 * 0.9, 1.0, 8)
    far = LogitComparison(0.05, 0.8, 8)
    assert judge("lossy", "float32", False, off, near)[0]
    right, reason = judge("lossy", "float32", False, off, far)
    assert not right and "misreads its storage" in reason


def test_an_fp8_cache_equals_its_emulation_on_the_cuda_path_too() -> None:
    """custom_ops and attention_backend torch: the layers a GPU runs (engine/model/
    fused_step.py), whose fp8 cache and its emulation both go through paged_attention."""
    base = {**TINY, "custom_ops": "torch", "attention_backend": "torch"}
    got = measure_switch_quality(base, {"kv_cache_dtype": "fp8"}, quality_prompts(512), 6)
    assert got.right, got.reason
    assert got.against_emulation is not None and got.against_emulation.rel_error == 0.0
    assert got.against_off is not None and got.against_off.rel_error > 0


def test_what_cannot_be_judged_says_so() -> None:
    assert judged_settings(TINY, {"model": "tiny-mha"}) is None  # another model
    assert judged_settings({**TINY, "device": "sim"}, {"batching": "static"}) is None
    base, on = judged_settings({**TINY, "dtype": "bfloat16"}, {"quantization": "int8"}) or ({}, {})
    assert base["dtype"] == "float32" and on == {"quantization": "int8"}
    with pytest.raises(ValueError, match="seed: NUMERIC_SWITCHES declares"):
        measure_switch_quality(TINY, {"seed": 1}, quality_prompts(512), 2)
