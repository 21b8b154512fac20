"""Naive attention: the textbook softmax(Q K^T / sqrt(d)) V, one sequence at a time.

The unfused baseline that fused kernels (the C kernel of engine/native, torch's
scaled_dot_product_attention: flash on CUDA, a fused CPU kernel) are measured against
(attention_backend="naive"). It does what they avoid: K and V are repeated to every query head
(no grouped-query sharing), and the whole score matrix [heads, query_len, context] is
materialized, masked, softmaxed and multiplied by V as separate tensors, so its memory traffic
grows with query_len x context rather than with the K/V read once.

K and V are read back from the paged cache (after this step's tokens were written), so a
prefill chunk and a decode take the same path.
"""

from __future__ import annotations

import torch

from engine.model.kv_dtype import decode_kv


def naive_paged_attention(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: list[int],
    seq_lens: list[int],
    scale: float,
    v_scale: float = 1.0,
) -> torch.Tensor:
    """Attend q [T, Hq, D] (rows of sequence i: [query_start_loc[i], query_start_loc[i+1]),
    the last positions of its seq_lens[i] tokens) to its context in ``kv_cache`` [2, num_blocks,
    block_size, Hkv, D] through ``block_tables`` [num_seqs, width]. ``scale`` is the softmax
    scale times the cache's K scale; the output, [T, Hq, D] in q's dtype, is multiplied by
    ``v_scale``."""
    num_heads, head_dim = q.shape[1], q.shape[2]
    block_size, num_kv_heads = kv_cache.shape[2], kv_cache.shape[3]
    group = num_heads // num_kv_heads
    slots_k = kv_cache[0].reshape(-1, num_kv_heads, head_dim)
    slots_v = kv_cache[1].reshape(-1, num_kv_heads, head_dim)
    out = torch.empty_like(q)
    offsets = torch.arange(block_size, device=q.device)
    for i, ctx in enumerate(seq_lens):
        start, end = query_start_loc[i], query_start_loc[i + 1]
        num_blocks = -(-ctx // block_size)
        slots = (block_tables[i, :num_blocks, None] * block_size + offsets).flatten()[:ctx]
        keys = decode_kv(slots_k.index_select(0, slots), q.dtype)  # [ctx, Hkv, D]
        values = decode_kv(slots_v.index_select(0, slots), q.dtype)
        # Every query head gets its own copy of its KV head: what GQA-aware kernels never do.
        keys = keys.repeat_interleave(group, dim=1).transpose(0, 1)  # [Hq, ctx, D]
        values = values.repeat_interleave(group, dim=1).transpose(0, 1)
        query = q[start:end].transpose(0, 1)  # [Hq, q_len, D]
        scores = torch.matmul(query.float(), keys.float().transpose(1, 2)) * scale
        q_len = end - start
        query_pos = torch.arange(ctx - q_len, ctx, device=q.device)
        future = torch.arange(ctx, device=q.device) > query_pos[:, None]  # [q_len, ctx]
        scores = scores.masked_fill(future, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        attended = torch.matmul(probs, values.float())
        if v_scale != 1.0:
            attended = attended * v_scale
        out[start:end] = attended.transpose(0, 1).to(q.dtype)
    return out
