"""Every engine switch that changes numbers, at real layer shapes (tests/support/real_shapes.py:
Llama-3-8B's widths, 2 layers, float32), against the same engine without it.

Exact switches must give the unswitched engine's greedy tokens, and teacher-forced logits equal
to float32 rounding. Lossy storages (fp8 KV cache, int8 and int4 weights) must match their
emulation (the same engine fed exactly what the storage keeps) far closer than they match the
float engine, and cost no more than their stated bound: bench.experiments.switch_quality's
rules, whose tolerances docs/reference-engine.md ("Is the output right?") justifies. At
2301656 the GPU check and the techniques table judged these storages by their free-running
logit error against the float engine, which measured 0.98-1.22 here for right paths.

Each test builds one to three 2.8 GB float32 engines, one at a time (an exact switch's free
greedy run follows from its forced run: switch_quality), so settings that must all be exact
share an engine; one engine's run of 4 prompts takes a few seconds on two cores.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from bench.experiments.forced_runs import GreedyLogits, greedy_logits
from bench.experiments.switch_quality import (
    EMULATION_SHARE,
    FLOAT32_EXACT,
    measure_switch_quality,
    settings_run,
)
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from tests.support.real_shapes import REAL_SHAPED, cut_preset, registered, switch_prompts

MAX_TOKENS = 10
BASE: dict[str, Any] = {
    "model": REAL_SHAPED,
    "device": "cpu",
    "dtype": "float32",
    "seed": 0,
    "max_model_len": 256,
    "kv_cache_memory_bytes": 256 * 2**20,
    "enable_prefix_caching": False,
}
# The cost of each lossy storage at these shapes (teacher-forced relative logit error against
# the float engine, and top-1 agreement), measured 0.075 and 80% (fp8), 0.044 and 88% (int8),
# 0.38 and 44% (int4) on 4 prompts of 16 tokens; bounded at about twice the error and at
# most 60% of the agreement. One fp8 value is off by up to 2^-4 of itself (3 mantissa bits);
# one linear layer's output at these widths by 0.9% (int8 per channel) and 7.8% (int4 in
# groups of 32), measured; two random layers amplify that about 4x, and a random model's flat
# logits turn small errors into flipped near ties.
COST_BOUND = {"fp8": (0.15, 0.5), "int8": (0.1, 0.55), "int4": (0.7, 0.25)}


@pytest.fixture(scope="module", autouse=True)
def _real_shaped() -> Iterator[None]:
    torch.set_num_threads(2)
    with registered(cut_preset()):
        yield


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    return switch_prompts()


@pytest.fixture(scope="module")
def off(prompts: list[list[int]]) -> GreedyLogits:
    return settings_run(BASE, prompts, MAX_TOKENS)


@pytest.mark.parametrize(
    ("on", "storage"),
    [({"kv_cache_dtype": "fp8"}, "fp8"), ({"quantization": "int8"}, "int8"),
     ({"quantization": "int4"}, "int4")],
    ids=["fp8-kv", "int8", "int4"],
)  # fmt: skip
def test_lossy_storage_matches_its_emulation_and_costs_its_bound(
    on: dict[str, Any], storage: str, prompts: list[list[int]], off: GreedyLogits
) -> None:
    got = measure_switch_quality(BASE, on, prompts, MAX_TOKENS, off=off)
    assert got.against_off is not None and got.against_emulation is not None
    assert got.right, got.reason
    assert got.against_emulation.rel_error <= EMULATION_SHARE * got.against_off.rel_error
    most_error, least_agreement = COST_BOUND[storage]
    assert got.against_off.rel_error <= most_error, got.against_off
    assert got.against_off.top1_agreement >= least_agreement, got.against_off


@pytest.mark.parametrize(
    "on",
    [
        # The scheduler: prompts prefilled in 32-token chunks, in static batches, 32-token blocks.
        {"max_num_batched_tokens": 32, "batching": "static", "block_size": 32},
        # Whole prompts only, each request's context reserved in consecutive blocks.
        {"enable_chunked_prefill": False, "max_num_batched_tokens": 64,
         "kv_layout": "contiguous"},
        {"attention_backend": "torch", "custom_ops": "torch"},  # the path CUDA takes
        {"attention_backend": "naive"},
        {"kv_cache": False},  # every step recomputes the whole sequence
    ],
    ids=lambda on: ",".join(f"{k}={v}" for k, v in on.items()),
)  # fmt: skip
def test_exact_switch_gives_the_same_tokens_and_logits(
    on: dict[str, Any], prompts: list[list[int]], off: GreedyLogits
) -> None:
    got = measure_switch_quality(BASE, on, prompts, MAX_TOKENS, off=off)
    assert got.greedy_identical, got.reason
    assert got.against_off is not None and got.against_off.rel_error <= FLOAT32_EXACT
    assert got.right, got.reason


def test_speculation_by_a_draft_that_is_the_target_gives_its_tokens(
    prompts: list[list[int]], off: GreedyLogits
) -> None:
    """A draft model of the target's preset given the target's weights: in float32 its drafts
    are the target's own choices and are accepted (a 1-token draft step against a 4-token
    verify may round a near tie apart, rarely)."""
    on = {"speculative": "draft", "draft_model": REAL_SHAPED, "num_speculative_tokens": 3}
    engine = LLMEngine(EngineConfig.from_flat({**BASE, **on}))
    runner = engine.executor
    runner.draft_model.load_state_dict(runner.model.state_dict())  # type: ignore[attr-defined]
    run = greedy_logits(engine, prompts, MAX_TOKENS)
    assert run.tokens == off.tokens
    stats = engine.spec_stats
    assert stats.num_draft_tokens > 0 and stats.acceptance_rate is not None
    assert stats.acceptance_rate >= 0.9, stats


def test_speculation_by_ngram_gives_the_targets_tokens(
    prompts: list[list[int]], off: GreedyLogits
) -> None:
    # A random model seldom repeats itself, so n-gram drafts are rare here; its verify path is
    # the draft model's, tested above.
    engine = LLMEngine(EngineConfig.from_flat({**BASE, "speculative": "ngram"}))
    assert greedy_logits(engine, prompts, MAX_TOKENS).tokens == off.tokens


def test_prefix_cache_hits_give_the_same_tokens(
    prompts: list[list[int]], off: GreedyLogits
) -> None:
    """The second prompt shares the first's two first blocks: run alone after it, it reads
    them from the cache instead of computing them, and must give what the unswitched engine
    gave it (in a batch of four: float32 rounding of another batch shape at most)."""
    cached = LLMEngine(EngineConfig.from_flat({**BASE, "enable_prefix_caching": True}))
    greedy_logits(cached, prompts[:1], MAX_TOKENS)
    hit = greedy_logits(cached, prompts[1:2], MAX_TOKENS, fresh_prefix_cache=False)
    assert cached.kv_cache_manager.prefix_cache_hits >= 32
    assert hit.tokens[0] == off.tokens[1]
    error = np.linalg.norm(hit.logits[0] - off.logits[1]) / np.linalg.norm(off.logits[1])
    assert float(error) <= FLOAT32_EXACT


@pytest.mark.parametrize("num_kv_heads", [1, 8], ids=["mqa", "gqa"])
def test_grouped_kv_heads_equal_their_repeated_heads(
    num_kv_heads: int, prompts: list[list[int]]
) -> None:
    """A model with ``num_kv_heads`` shared K/V heads computes exactly what the same model
    with 32 K/V heads computes when each shared head's K and V projections are repeated for
    its query heads: the grouping (decode's grouped matmul, SDPA's enable_gqa, the C kernel)
    must change nothing."""
    # One layer: the grouping is the same in every layer, and two 32-KV-head engines of two
    # layers would double the test's time for nothing more.
    grouped = cut_preset(f"{REAL_SHAPED}-kv{num_kv_heads}", layers=1, num_kv_heads=num_kv_heads)
    full = cut_preset(f"{REAL_SHAPED}-kv32", layers=1, num_kv_heads=32)
    with registered(grouped, full):
        engine = LLMEngine(EngineConfig.from_flat({**BASE, "model": grouped.name}))
        weights = engine.executor.model.state_dict()  # type: ignore[attr-defined]
        want = greedy_logits(engine, prompts, MAX_TOKENS)
        del engine
        mha = LLMEngine(EngineConfig.from_flat({**BASE, "model": full.name}))
        mha.executor.model.load_state_dict(_repeat_kv(weights, grouped.num_key_value_heads))  # type: ignore[attr-defined]
        got = greedy_logits(mha, prompts, MAX_TOKENS)
    assert got.tokens == want.tokens
    for a, b in zip(got.logits, want.logits, strict=True):
        assert float(np.linalg.norm(a - b) / np.linalg.norm(b)) <= FLOAT32_EXACT


def _repeat_kv(weights: dict[str, torch.Tensor], num_kv_heads: int) -> dict[str, torch.Tensor]:
    """``weights`` with each layer's fused qkv_proj rows of K and V repeated per query group."""
    heads, head_dim = 32, 128
    group = heads // num_kv_heads
    out = dict(weights)
    for name, w in weights.items():
        if name.endswith("qkv_proj.weight"):
            q, k, v = w.split([heads * head_dim, num_kv_heads * head_dim,
                               num_kv_heads * head_dim])  # fmt: skip
            k, v = (t.view(num_kv_heads, head_dim, -1).repeat_interleave(group, 0)
                    .reshape(heads * head_dim, -1) for t in (k, v))  # fmt: skip
            out[name] = torch.cat((q, k, v))
    return out
