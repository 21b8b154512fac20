"""Attention keeps SDPA's fast backends eligible and bounds the decode gather.

The reference is the implementation this replaced: every prefill chunk in one
`scaled_dot_product_attention` call with an explicit boolean mask [query_len, context] and
`enable_gqa`, and every decode sequence in one padded gather. Compared in fp32 at atol 1e-5
(outputs are O(1); only summation order differs). The CUDA policy (no mask tensor, none at all
with GQA) is run on a CPU by emptying MASK_WITH_GQA_DEVICES, the CPU's own (mask with GQA, in
its flash kernel) as it is.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import engine.model.attention as attention
from engine.model.attention import AttentionMetadata, decode_groups, paged_attention
from tests.support.cuda import gpu

NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE, NUM_BLOCKS = 8, 2, 16, 4, 128
SCALE = HEAD_DIM**-0.5
CASES = {
    "prefill": [(23, 23)],
    "chunked_continuation": [(40, 16)],
    "prefix_hit": [(61, 5)],  # a long cached prefix, a few new tokens
    "decode": [(17, 1), (3, 1), (52, 1)],
    "mixed": [(9, 1), (30, 1), (12, 12), (44, 9)],
}


def _batch(
    shapes: list[tuple[int, int]], device: str = "cpu", dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, AttentionMetadata, list]:
    """(q, k, v, cache, meta, per-sequence (full K/V, start)): decodes first, earlier context
    already in a NaN-filled cache so that a stray read shows."""
    gen = torch.Generator().manual_seed(len(shapes) * 7 + shapes[0][0])
    free = torch.randperm(NUM_BLOCKS, generator=gen).tolist()
    tables = [[free.pop() for _ in range(-(-ctx // BLOCK_SIZE))] for ctx, _ in shapes]
    num_decode = sum(1 for _, q_len in shapes if q_len == 1)
    meta = AttentionMetadata.build(
        [q for _, q in shapes], [c for c, _ in shapes], tables, BLOCK_SIZE, num_decode, device
    )
    cache = torch.full((2, NUM_BLOCKS, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM), float("nan"))
    qs, ks, vs, seqs = [], [], [], []
    for (ctx, q_len), table in zip(shapes, tables, strict=True):
        kv = torch.randn(2, ctx, NUM_KV_HEADS, HEAD_DIM, generator=gen)
        start = ctx - q_len
        for pos in range(start):
            cache[:, table[pos // BLOCK_SIZE], pos % BLOCK_SIZE] = kv[:, pos]
        qs.append(torch.randn(q_len, NUM_HEADS, HEAD_DIM, generator=gen))
        ks.append(kv[0, start:])
        vs.append(kv[1, start:])
        seqs.append((kv, start))

    def put(x: torch.Tensor) -> torch.Tensor:
        return x.to(device=device, dtype=dtype)

    return put(torch.cat(qs)), put(torch.cat(ks)), put(torch.cat(vs)), put(cache), meta, seqs


def _previous_implementation(q: torch.Tensor, seqs: list, shapes: list) -> torch.Tensor:
    """Per sequence: SDPA over its whole context with the explicit mask and enable_gqa."""
    out, row = [], 0
    for (kv, start), (ctx, q_len) in zip(seqs, shapes, strict=True):
        query = q[row : row + q_len].transpose(0, 1)[None].float()
        keys, values = (t.transpose(0, 1)[None] for t in kv.unbind(0))
        allowed = torch.arange(ctx) <= torch.arange(start, ctx)[:, None]
        attended = F.scaled_dot_product_attention(
            query, keys, values, attn_mask=allowed, scale=SCALE, enable_gqa=True
        )
        out.append(attended[0].transpose(0, 1))
        row += q_len
    return torch.cat(out)


class SdpaCalls:
    """Records the keyword arguments and head counts of every SDPA call while active."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def record(self, query: torch.Tensor, key: torch.Tensor, **kwargs: Any) -> None:
        self.calls.append({**kwargs, "q_heads": query.shape[-3], "kv_heads": key.shape[-3]})


@pytest.fixture
def sdpa_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[SdpaCalls]:
    calls = SdpaCalls()
    original = F.scaled_dot_product_attention

    def spy(query, key, value, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.record(query, key, **kwargs)
        # torch's CausalBias dispatch checks that it was called as F.scaled_dot_product_attention.
        monkeypatch.setattr(F, "scaled_dot_product_attention", original)
        try:
            return original(query, key, value, *args, **kwargs)
        finally:
            monkeypatch.setattr(F, "scaled_dot_product_attention", spy)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    yield calls


POLICIES = ["cpu", "cuda_policy"]


@pytest.fixture(params=POLICIES)
def policy(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """'cpu': this CPU's own policy; 'cuda_policy': CUDA's, run here."""
    if request.param == "cuda_policy":
        monkeypatch.setattr(attention, "MASK_WITH_GQA_DEVICES", frozenset())
    return request.param


@pytest.mark.parametrize("case", list(CASES))
def test_outputs_equal_the_previous_implementation(case: str, policy: str) -> None:
    shapes = CASES[case]
    q, k, v, cache, meta, seqs = _batch(shapes)
    out = paged_attention(q, k, v, cache, meta, scale=SCALE)
    torch.testing.assert_close(out, _previous_implementation(q, seqs, shapes), atol=1e-5, rtol=0)


@pytest.mark.parametrize("case", ["prefill", "chunked_continuation", "prefix_hit", "mixed"])
def test_under_the_cuda_policy_no_mask_tensor_reaches_sdpa_and_none_at_all_with_gqa(
    case: str, sdpa_calls: SdpaCalls, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(attention, "MASK_WITH_GQA_DEVICES", frozenset())
    q, k, v, cache, meta, _ = _batch(CASES[case])
    paged_attention(q, k, v, cache, meta, scale=SCALE)
    assert sdpa_calls.calls
    for call in sdpa_calls.calls:
        mask = call.get("attn_mask")
        assert not isinstance(mask, torch.Tensor) or type(mask) is not torch.Tensor, call
        if call.get("enable_gqa") or call["q_heads"] != call["kv_heads"]:
            assert mask is None and call.get("is_causal"), call


def test_a_continuation_runs_under_sdpa_kernel_without_the_math_backend(policy: str) -> None:
    shapes = CASES["prefix_hit"]
    q, k, v, cache, meta, seqs = _batch(shapes)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        out = paged_attention(q, k, v, cache, meta, scale=SCALE)
    torch.testing.assert_close(out, _previous_implementation(q, seqs, shapes), atol=1e-5, rtol=0)


def test_decode_groups_keep_each_padded_gather_within_the_budget() -> None:
    lens = [10, 3, 40, 8, 8, 100, 2]
    assert decode_groups(lens, 2, None) == [(0, 7)]
    assert decode_groups([], 2, 64) == []
    groups = decode_groups(lens, 2, 2 * 2 * 2 * 40)  # room for two sequences of 40
    assert groups[0][0] == 0 and groups[-1][1] == len(lens)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(groups))
    for start, end in groups:
        rows = 2 * (end - start) * 2 * max(lens[start:end])
        assert rows <= 2 * 2 * 2 * 40 or end - start == 1  # 100 alone is over the budget


def test_the_cpu_keeps_its_mask_with_gqa_for_a_continuation(sdpa_calls: SdpaCalls) -> None:
    q, k, v, cache, meta, _ = _batch(CASES["chunked_continuation"])
    paged_attention(q, k, v, cache, meta, scale=SCALE)
    (call,) = sdpa_calls.calls
    assert type(call["attn_mask"]) is torch.Tensor and call["enable_gqa"]
    assert call["kv_heads"] == NUM_KV_HEADS  # K/V not repeated on the CPU


def test_a_bounded_decode_gather_gives_the_same_output() -> None:
    shapes = [(ctx, 1) for ctx in (17, 3, 52, 9, 30, 1, 44)]
    q, k, v, cache, meta, seqs = _batch(shapes)
    row_bytes = HEAD_DIM * q.element_size()
    budget = 2 * NUM_KV_HEADS * 52 * row_bytes  # one longest sequence per group at most
    out = paged_attention(q, k, v, cache.clone(), meta, scale=SCALE, gather_budget_bytes=budget)
    assert len(meta._plan.decodes) > 2  # type: ignore[union-attr]
    torch.testing.assert_close(out, _previous_implementation(q, seqs, shapes), atol=1e-5, rtol=0)


@gpu
@pytest.mark.parametrize("case", ["chunked_continuation", "prefix_hit", "prefill"])
def test_cuda_bf16_prefill_runs_on_flash_or_memory_efficient_sdpa(case: str) -> None:
    shapes = CASES[case]
    q, k, v, cache, meta, seqs = _batch(shapes, "cuda", torch.bfloat16)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        out = paged_attention(q, k, v, cache, meta, scale=SCALE)  # raises if only math fits
    expected = _previous_implementation(q.float().cpu(), seqs, shapes)
    torch.testing.assert_close(out.float().cpu(), expected, atol=3e-2, rtol=0)
