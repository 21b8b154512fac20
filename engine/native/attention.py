"""The C paged decode attention kernel (engine/native/csrc/paged_decode_attention.c).

The torch path gathers every decode sequence's K and V into a padded tensor before two batched
matmuls: at 100 sequences of ~200 tokens that copy, and the padding, cost more than the attention
itself. The kernel reads K and V once, straight from the block-table cache. It covers CPU float32
or bfloat16 queries over a cache of the same dtype; everything else (CUDA, float16, an fp8
cache) takes the torch path. Built with the other kernels by engine/native/lib.py.
"""

from __future__ import annotations

import torch

from engine.native.lib import SUFFIX, NativeKernelError, available, load

__all__ = ["NativeKernelError", "available", "load", "paged_decode_attention", "supports"]


def supports_dtypes(device: torch.device, dtype: torch.dtype, kv_dtype: torch.dtype) -> bool:
    """Whether the kernel covers a model of ``dtype`` on ``device`` with a ``kv_dtype`` cache."""
    return device.type == "cpu" and dtype in SUFFIX and kv_dtype == dtype


def supports(q: torch.Tensor, kv_cache: torch.Tensor) -> bool:
    """Whether the kernel covers these tensors (see supports_dtypes)."""
    return supports_dtypes(q.device, q.dtype, kv_cache.dtype)


def paged_decode_attention(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    v_scale: float = 1.0,
) -> torch.Tensor:
    """Attention output [num_seqs, num_heads, head_dim] for one query token per sequence.

    q [num_seqs, num_heads, head_dim] float32 or bfloat16; kv_cache [2, num_blocks,
    block_size, num_kv_heads, head_dim] of q's dtype, contiguous, already holding every query
    token's own K/V; block_tables int64 [num_seqs, width] covering each context; seq_lens int64
    [num_seqs], each >= 1 tokens.
    """
    if not supports(q, kv_cache):
        raise ValueError(
            f"the kernel covers CPU float32/bfloat16 with a cache of the same dtype, got "
            f"{q.dtype} queries on {q.device} over a {kv_cache.dtype} cache"
        )
    fn = getattr(load(), f"paged_decode_attention_{SUFFIX[q.dtype]}")
    num_seqs, num_heads, head_dim = q.shape
    _, num_blocks, block_size, num_kv_heads, cache_head_dim = kv_cache.shape
    if cache_head_dim != head_dim or num_heads % num_kv_heads:
        raise ValueError(
            f"q has {num_heads} heads of {head_dim}, the cache {num_kv_heads} KV heads of "
            f"{cache_head_dim}: head_dim must match and num_heads be a multiple of num_kv_heads"
        )
    if not kv_cache.is_contiguous():
        raise ValueError("kv_cache must be contiguous (the engine allocates it so)")
    q = q.contiguous()
    tables = block_tables.contiguous()
    lens = seq_lens.contiguous()
    out = torch.empty_like(q)
    rc = fn(
        q.data_ptr(), kv_cache.data_ptr(), tables.data_ptr(), tables.shape[1], lens.data_ptr(),
        out.data_ptr(), num_seqs, num_heads, num_kv_heads, head_dim, num_blocks, block_size,
        scale, v_scale, torch.get_num_threads(),
    )  # fmt: skip
    if rc != 0:
        raise MemoryError("paged decode attention could not allocate its scratch buffers")
    return out
