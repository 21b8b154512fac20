"""Paged attention equals dense causal attention, for random block tables and ragged batches.

Reference: per sequence, the full K/V in position order, K/V heads repeated for GQA, an explicit
causal mask and an fp32 softmax. Tolerances: fp32 atol 1e-5 (outputs are O(1); only summation
order differs), bf16 atol 3e-2 (bf16 inputs, scores and probabilities carry ~3 digits).
"""

from __future__ import annotations

import random

import pytest
import torch

from engine.model.attention import AttentionMetadata, paged_attention

NUM_HEADS, NUM_KV_HEADS, HEAD_DIM = 8, 2, 16
BLOCK_SIZE, NUM_BLOCKS = 4, 96
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 3e-2}


def dense_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int) -> torch.Tensor:
    """q [q_len, Hq, D] at positions start.., k and v [ctx, Hkv, D] for positions 0..ctx-1."""
    group = q.shape[1] // k.shape[1]
    k, v = k.float().repeat_interleave(group, 1), v.float().repeat_interleave(group, 1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k) * HEAD_DIM**-0.5
    query_pos = torch.arange(start, start + q.shape[0])[:, None]
    scores = scores.masked_fill(torch.arange(k.shape[0]) > query_pos, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


def run_batch(
    shapes: list[tuple[int, int]], num_decode: int, dtype: torch.dtype, seed: int
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor], torch.Tensor, AttentionMetadata]:
    """shapes: (seq_len, query_len) per sequence, decodes first. Returns (paged output, dense
    output, per-sequence full K/V, cache, metadata). The cache starts NaN-filled with only the
    earlier context of each sequence written, so any read of a foreign slot shows up as NaN."""
    gen = torch.Generator().manual_seed(seed)
    free = torch.randperm(NUM_BLOCKS, generator=gen).tolist()
    tables = [[free.pop() for _ in range(-(-ctx // BLOCK_SIZE))] for ctx, _ in shapes]
    meta = AttentionMetadata.build(
        [q_len for _, q_len in shapes], [ctx for ctx, _ in shapes], tables, BLOCK_SIZE, num_decode
    )
    cache = torch.full((2, NUM_BLOCKS, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM), float("nan"))
    cache = cache.to(dtype)
    qs, ks, vs, expected, full_kv = [], [], [], [], []
    for (ctx, q_len), table in zip(shapes, tables, strict=True):
        kv = torch.randn(2, ctx, NUM_KV_HEADS, HEAD_DIM, generator=gen).to(dtype)
        q = torch.randn(q_len, NUM_HEADS, HEAD_DIM, generator=gen).to(dtype)
        start = ctx - q_len
        for pos in range(start):  # the context cached by earlier steps
            cache[:, table[pos // BLOCK_SIZE], pos % BLOCK_SIZE] = kv[:, pos]
        qs.append(q)
        ks.append(kv[0, start:])
        vs.append(kv[1, start:])
        expected.append(dense_reference(q, kv[0], kv[1], start))
        full_kv.append(kv)
    out = paged_attention(
        torch.cat(qs), torch.cat(ks), torch.cat(vs), cache, meta, scale=HEAD_DIM**-0.5
    )
    return out, torch.cat(expected), full_kv, cache, meta


def random_shapes(rng: random.Random, num_decode: int, num_prefill: int) -> list[tuple[int, int]]:
    decodes = [(rng.randint(1, 40), 1) for _ in range(num_decode)]
    prefills = []
    for _ in range(num_prefill):
        ctx = rng.randint(1, 40)
        # Half start at position 0 (first chunk), half mid-sequence (a later chunk).
        prefills.append((ctx, ctx if rng.random() < 0.5 else rng.randint(1, ctx)))
    return decodes + prefills


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("seed", range(4))
def test_mixed_batches_match_dense_attention(dtype: torch.dtype, seed: int) -> None:
    rng = random.Random(seed)
    num_decode, num_prefill = rng.randint(0, 6), rng.randint(0, 4)
    if num_decode + num_prefill == 0:
        num_decode = 1
    shapes = random_shapes(rng, num_decode, num_prefill)
    out, expected, _, _, _ = run_batch(shapes, num_decode, dtype, seed)
    assert out.dtype == dtype and out.shape == expected.shape
    torch.testing.assert_close(out.float(), expected, atol=TOLERANCE[dtype], rtol=0)


def test_hand_picked_edges() -> None:
    """Context of exactly one block, a one-token context, a one-token mid-sequence prefill chunk
    and a chunk that ends on a block boundary, all in one batch."""
    shapes = [(4, 1), (1, 1), (37, 1), (9, 1), (16, 5), (8, 8), (23, 7)]
    out, expected, _, _, _ = run_batch(shapes, 3, torch.float32, seed=11)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)


def test_new_tokens_are_written_to_their_slots() -> None:
    shapes = [(6, 1), (10, 3), (5, 5)]
    _, _, full_kv, cache, meta = run_batch(shapes, 1, torch.float32, seed=5)
    for i, ((ctx, _), kv) in enumerate(zip(shapes, full_kv, strict=True)):
        table = meta.block_tables[i]
        for pos in range(ctx):
            torch.testing.assert_close(
                cache[:, table[pos // BLOCK_SIZE], pos % BLOCK_SIZE], kv[:, pos], atol=0, rtol=0
            )


def test_metadata_helpers_and_validation() -> None:
    meta = AttentionMetadata.build([1, 3], [5, 7], [[2, 3], [4, 0]], BLOCK_SIZE, 1)
    assert meta.token_positions().tolist() == [4, 4, 5, 6]
    assert meta.slot_mapping.tolist() == [3 * 4 + 0, 0 * 4 + 0, 0 * 4 + 1, 0 * 4 + 2]
    assert meta.plan(64, 2) is meta.plan(64, 2)  # built once per step, shared by every layer

    with pytest.raises(ValueError, match="needs 3 blocks of 4"):
        AttentionMetadata.build([1], [9], [[1, 2]], BLOCK_SIZE, 1)
    narrow = AttentionMetadata.build([1], [9], [[1, 2, 3]], BLOCK_SIZE, 1)
    narrow.block_tables = narrow.block_tables[:, :2]  # as an engine bug might hand it over
    with pytest.raises(ValueError, match="needs 3 blocks"):
        narrow.plan(64, 2)
    bad_decode = AttentionMetadata.build([2], [5], [[1, 2]], BLOCK_SIZE, 1)
    with pytest.raises(ValueError, match="one query token"):
        bad_decode.plan(64, 2)
