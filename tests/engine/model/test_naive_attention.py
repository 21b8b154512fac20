"""The naive attention baseline (softmax(QK^T)V, scores materialized) against the fused paths,
and kv_cache off (every step recomputes the whole sequence): the same greedy tokens."""

from __future__ import annotations

import random

import pytest
import torch

from engine.config import EngineConfig, SettingError
from engine.model.attention import AttentionMetadata, paged_attention
from tests.support.engine_fixtures import make_engine, ragged_workload, run

# (query heads, KV heads, head_dim): GQA, MHA, MQA.
SHAPES = [(8, 2, 32), (8, 8, 16), (8, 1, 32)]


def _mixed_step(heads: int, kv_heads: int, head_dim: int, seed: int):
    """Decodes of 1..70 tokens, then a first prefill chunk and a chunk in mid-prompt."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    block_size, num_blocks = 16, 64
    cache = torch.randn(2, num_blocks, block_size, kv_heads, head_dim, generator=gen)
    decode_lens = [1, 16, 17, rng.randint(2, 70)]
    query_lens = [1] * len(decode_lens) + [9, 5]
    seq_lens = [*decode_lens, 9, 40]
    free = list(range(num_blocks))
    rng.shuffle(free)
    tables = [[free.pop() for _ in range(-(-n // block_size))] for n in seq_lens]
    meta = AttentionMetadata.build(query_lens, seq_lens, tables, block_size, len(decode_lens))
    q, k, v = (
        torch.randn(sum(query_lens), h, head_dim, generator=gen)
        for h in (heads, kv_heads, kv_heads)
    )
    return q, k, v, cache, meta


@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), SHAPES)
def test_naive_matches_the_fused_paths_in_fp32(heads: int, kv_heads: int, head_dim: int) -> None:
    q, k, v, cache, meta = _mixed_step(heads, kv_heads, head_dim, seed=heads + kv_heads)
    fused = paged_attention(q, k, v, cache.clone(), meta, head_dim**-0.5)
    meta.naive = True
    naive = paged_attention(q, k, v, cache.clone(), meta, head_dim**-0.5)
    torch.testing.assert_close(naive, fused, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["torch", "native", "naive"])
def test_engine_greedy_tokens_match_naive_attention(backend: str) -> None:
    """The whole engine, chunked prefill and a batch of 16: naive gives the fused paths' tokens."""
    workload = ragged_workload(16, seed=3)
    reference = run(make_engine(attention_backend="naive", max_num_batched_tokens=64), workload)
    engine = make_engine(attention_backend=backend, max_num_batched_tokens=64)
    if backend == "native" and engine.describe()["attention_backend"] != "native":
        pytest.skip("the native kernel does not build here")
    assert engine.describe()["attention_backend"] == backend
    assert run(engine, workload) == reference


def test_kv_cache_off_gives_the_same_tokens_and_recomputes_every_step() -> None:
    workload = ragged_workload(12, seed=5)
    on = make_engine(enable_prefix_caching=False)
    off = make_engine(kv_cache=False, max_num_batched_tokens=4096)
    assert off.describe()["prefix_caching"] is False
    assert run(off, workload) == run(on, workload)
    steps_on, steps_off = on.steps.since(0), off.steps.since(0)
    prefill_on = sum(steps_on["num_prefill_tokens"])
    prefill_off = sum(steps_off["num_prefill_tokens"])
    # Every output token but the last costs a prefill of its whole sequence: sum over the
    # requests of prompt + (prompt + 1) + ... + (prompt + outputs - 1).
    expected = sum(
        sum(len(prompt) + i for i in range(params.max_tokens)) for prompt, params in workload
    )
    assert prefill_off == expected
    assert prefill_on == sum(len(prompt) for prompt, _ in workload)
    assert sum(steps_off["num_decode_tokens"]) == 0
    assert off.block_pool.num_used_blocks == 0


def test_kv_cache_off_refuses_what_needs_reuse() -> None:
    with pytest.raises(SettingError, match=r"enable_prefix_caching.*needs kv_cache on"):
        EngineConfig.from_flat({"kv_cache": False, "enable_prefix_caching": True})
    with pytest.raises(SettingError, match=r"speculative.*needs kv_cache on"):
        EngineConfig.from_flat({"kv_cache": False, "speculative": "ngram"})
