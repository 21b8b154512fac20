"""Paged attention over a block-table KV cache, in plain PyTorch.

Cache layout, per layer: `kv_cache[2, num_blocks, block_size, num_kv_heads, head_dim]` (0 = K,
1 = V), allocated by the engine. Token t of a sequence lives in slot
`block_table[t // block_size] * block_size + t % block_size` of the flattened cache.

A batch holds `num_decode_seqs` one-token decodes first, then prefill chunks (which may start in
the middle of a prompt: chunked prefill). Per layer this module does:
  * one `index_copy_` that writes every new token's K and V into its slot (an fp8 cache,
    engine/model/kv_dtype.py, stores them scaled and saturated, through a uint8 view);
  * one `index_select` that gathers the K/V of the decode sequences, padded to the longest
    context and already head-major, then one grouped-query matmul / masked softmax / matmul for
    them (K/V are never repeated per query head); the sequences are split into groups so that
    one group's gathered K/V never exceeds `DECODE_GATHER_BUDGET_BYTES` (a transient per layer);
  * one gather (none for a first chunk) and one `scaled_dot_product_attention` per prefill chunk.
    A first chunk is `is_causal`. A later chunk or a prefix hit (queries at the end of a longer
    context) on CUDA passes torch's lower-right `CausalBias`, which CUDA runs in the flash or
    memory-efficient kernel; those take no GQA with a bias, so such a chunk repeats its gathered
    K/V heads to the query heads, for that chunk only. An explicit mask with `enable_gqa` would
    leave CUDA's SDPA only its math backend, which materializes [heads, query_len, context]
    scores. A CPU's SDPA runs a mask with GQA in its flash kernel, where repeating the heads
    measured 1.5-1.8x slower, so on the devices of `MASK_WITH_GQA_DEVICES` the chunk keeps the
    explicit mask and GQA.
With the C kernel (meta.native_decode, engine/native/attention.py) every row of the step, decode
or prefill, is one call instead: a prefill token at position p is a query over the first p + 1
slots of its sequence's block table, already written, which is causal attention.
Everything derived from the metadata and the cache geometry alone (gather rows, masks) is built
once per step in `AttentionPlan`, by the first layer, and reused by the others. Nothing here
reads a tensor back to the host, so a GPU step needs no synchronisation.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from engine.model.kv_dtype import decode_kv, encode_kv, is_fp8
from engine.model.naive_attention import naive_paged_attention
from engine.native import attention as native_attention

# The most one decode group's gathered K/V (keys and values, padded, in the query's dtype) may
# take per layer: bytes. A step's decode sequences are split into as many groups as this needs;
# a single sequence whose context alone is larger forms a group of its own.
DECODE_GATHER_BUDGET_BYTES = 256 * 1024**2
# Device types whose SDPA runs an explicit mask together with GQA in a fused kernel (the CPU's
# flash kernel does; CUDA's flash and memory-efficient kernels do not).
MASK_WITH_GQA_DEVICES = frozenset({"cpu"})


@dataclass
class DecodeBatch:
    """Gather plan for decode sequences [seq_start, seq_start + num_seqs) of the batch (their
    query rows are the same indices). `kv_rows` [2 * num_seqs * Hkv * max_ctx] are rows of the
    cache viewed as [-1, head_dim], ordered (K/V, sequence, kv head, position); `pad_mask`
    [num_seqs, 1, 1, max_ctx] is True where a key position is padding."""

    seq_start: int
    num_seqs: int
    max_ctx: int
    kv_rows: torch.Tensor
    pad_mask: torch.Tensor


@dataclass
class PrefillChunk:
    """One prefill chunk: its query rows [token_start, token_end) of the batch and its context
    length `ctx` (tokens). `kv_rows` [2 * Hkv * ctx] (as in DecodeBatch) is None when the chunk
    starts at position 0: then the fresh K/V are the whole context. `allowed` [query_len, ctx]
    (True = attend) is the explicit mask of a later chunk on a device of
    MASK_WITH_GQA_DEVICES, else None."""

    token_start: int
    token_end: int
    ctx: int
    kv_rows: torch.Tensor | None
    allowed: torch.Tensor | None = None


@dataclass
class AttentionPlan:
    """Everything attention derives from the metadata for one cache geometry."""

    num_cache_slots: int
    num_kv_heads: int
    native: bool
    decodes: list[DecodeBatch]
    prefills: list[PrefillChunk]
    # With the C kernel: each token's block-table row int64 [T, width] and context length
    # (its position + 1) int64 [T]; decode and prefill then take no other plan.
    token_tables: torch.Tensor | None = None
    token_ctx_lens: torch.Tensor | None = None
    gather_budget_rows: int | None = None

    @property
    def geometry(self) -> tuple[int, int, bool, int | None]:
        """What the plan was built for (AttentionMetadata.plan rebuilds it on a change)."""
        return (self.num_cache_slots, self.num_kv_heads, self.native, self.gather_budget_rows)


@dataclass
class AttentionMetadata:
    """Where one step's tokens sit in the paged KV cache (shared by all layers of a forward).

    slot_mapping: int64 [num_tokens], flat slot (block_id * block_size + offset) that each new
        token's K/V is written to, in batch order.
    query_start_loc: len num_seqs + 1; the tokens of sequence i are rows [qsl[i], qsl[i+1]).
    seq_lens / seq_lens_t: context length of each sequence including this step's tokens.
    block_tables: int64 [num_seqs, max_blocks_per_seq], padded with 0.
    num_decode_seqs: the first num_decode_seqs sequences have exactly one query token; the rest
        are prefill chunks whose positions continue from seq_len - query_len.
    Slots past a sequence's length are never read, so the cache may be allocated uninitialised.
    """

    slot_mapping: torch.Tensor
    query_start_loc: list[int]
    seq_lens: list[int]
    seq_lens_t: torch.Tensor
    block_tables: torch.Tensor
    num_decode_seqs: int
    block_size: int
    # Every row, decode and prefill, through the C kernel (engine/native/attention.py) where
    # it covers the tensors; set by the model runner from the engine's attention_backend.
    native_decode: bool = False
    # The unfused baseline (engine/model/naive_attention.py), attention_backend="naive".
    naive: bool = False
    _plan: AttentionPlan | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def build(
        cls,
        query_lens: Sequence[int],
        seq_lens: Sequence[int],
        block_tables: Sequence[Sequence[int]],
        block_size: int,
        num_decode_seqs: int,
        device: torch.device | str = "cpu",
    ) -> AttentionMetadata:
        """Convenience constructor from per-sequence lists (used by tests and simple runners)."""
        if not len(query_lens) == len(seq_lens) == len(block_tables):
            raise ValueError("query_lens, seq_lens and block_tables need one entry per sequence")
        for i, (ctx, blocks) in enumerate(zip(seq_lens, block_tables, strict=True)):
            if len(blocks) * block_size < ctx:
                raise ValueError(
                    f"sequence {i}: seq_len {ctx} needs {-(-ctx // block_size)} blocks of "
                    f"{block_size}, its block table has {len(blocks)}"
                )
        width = max((len(t) for t in block_tables), default=0) or 1
        padded = [list(blocks) + [0] * (width - len(blocks)) for blocks in block_tables]
        meta = cls(
            slot_mapping=torch.zeros(0, dtype=torch.int64, device=device),
            query_start_loc=[0, *itertools.accumulate(query_lens)],
            seq_lens=list(seq_lens),
            seq_lens_t=torch.tensor(list(seq_lens), dtype=torch.int64, device=device),
            block_tables=torch.tensor(padded, dtype=torch.int64, device=device).view(-1, width),
            num_decode_seqs=num_decode_seqs,
            block_size=block_size,
        )
        positions = meta.token_positions()
        seq_of_token = torch.repeat_interleave(
            torch.arange(len(query_lens), device=device),
            torch.tensor(list(query_lens), dtype=torch.int64, device=device),
        )
        blocks = meta.block_tables[seq_of_token, positions // block_size]
        meta.slot_mapping = blocks * block_size + positions % block_size
        return meta

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens)

    def token_positions(self) -> torch.Tensor:
        """Absolute position of every token of the batch, int64 [num_tokens] (for RoPE)."""
        qsl, device = self.query_start_loc, self.seq_lens_t.device
        query_lens = torch.tensor(
            [b - a for a, b in itertools.pairwise(qsl)], dtype=torch.int64, device=device
        )
        # Position = seq_len - query_len + rank of the token among its sequence's rows.
        first = torch.repeat_interleave(self.seq_lens_t - query_lens, query_lens)
        starts = torch.repeat_interleave(
            torch.tensor(qsl[:-1], dtype=torch.int64, device=device), query_lens
        )
        return first + torch.arange(qsl[-1], device=device) - starts

    def plan(
        self,
        num_cache_slots: int,
        num_kv_heads: int,
        native: bool = False,
        gather_budget_rows: int | None = None,
    ) -> AttentionPlan:
        """Gather rows and masks for this step and a cache of `num_cache_slots` slots
        (num_blocks * block_size) of `num_kv_heads` heads: built by the first layer, reused.
        With `native` the decode rows go to the C kernel, which needs no gather plan.
        `gather_budget_rows` bounds one decode group's gathered rows (None: no bound)."""
        plan = self._plan
        geometry = (num_cache_slots, num_kv_heads, native, gather_budget_rows)
        if plan is None or plan.geometry != geometry:
            plan = self._plan = _make_plan(
                self, num_cache_slots, num_kv_heads, native, gather_budget_rows
            )
        return plan


def _slots_for_positions(meta: AttentionMetadata, rows: slice, ctx: int) -> torch.Tensor:
    """Flat cache slots of positions [0, ctx) for the sequences in `rows`: int64 [n, ctx]."""
    num_blocks = -(-ctx // meta.block_size)
    if num_blocks > meta.block_tables.shape[1]:
        raise ValueError(
            f"block_tables has {meta.block_tables.shape[1]} columns but a context of {ctx} "
            f"tokens needs {num_blocks} blocks of {meta.block_size}; widen block_tables"
        )
    offsets = torch.arange(meta.block_size, device=meta.block_tables.device)
    slots = meta.block_tables[rows, :num_blocks, None] * meta.block_size + offsets
    return slots.flatten(1)[:, :ctx]


def _cache_rows(slots: torch.Tensor, num_cache_slots: int, num_kv_heads: int) -> torch.Tensor:
    """Rows of the cache viewed as [2 * num_cache_slots * Hkv, head_dim] holding K then V of
    `slots` [n, ctx], ordered (K/V, sequence, kv head, position): one index_select then yields
    K and V already head-major, as the attention matmuls want them, with no further copy."""
    heads = torch.arange(num_kv_heads, device=slots.device)[:, None]
    k_rows = slots[:, None, :] * num_kv_heads + heads  # [n, Hkv, ctx]
    return torch.stack((k_rows, k_rows + num_cache_slots * num_kv_heads)).reshape(-1)


def decode_groups(
    seq_lens: Sequence[int], num_kv_heads: int, budget_rows: int | None
) -> list[tuple[int, int]]:
    """Split decode sequences (their context lengths, in batch order) into consecutive groups
    [start, end) whose padded gather, 2 * n * num_kv_heads * longest context rows, stays within
    `budget_rows`; a sequence over the budget alone is a group of one. None: one group."""
    if not seq_lens:
        return []
    if budget_rows is None:
        return [(0, len(seq_lens))]
    groups, start, longest = [], 0, 0
    for i, ctx in enumerate(seq_lens):
        widest = max(longest, ctx)
        if i > start and 2 * (i + 1 - start) * num_kv_heads * widest > budget_rows:
            groups.append((start, i))
            start, widest = i, ctx
        longest = widest
    groups.append((start, len(seq_lens)))
    return groups


def _make_plan(
    meta: AttentionMetadata,
    num_cache_slots: int,
    num_kv_heads: int,
    native: bool,
    gather_budget_rows: int | None = None,
) -> AttentionPlan:
    qsl, nd = meta.query_start_loc, meta.num_decode_seqs
    if len(qsl) != meta.num_seqs + 1 or not 0 <= nd <= meta.num_seqs:
        raise ValueError(
            f"query_start_loc has {len(qsl)} entries and num_decode_seqs is {nd}; need "
            f"num_seqs + 1 = {meta.num_seqs + 1} entries and 0 <= num_decode_seqs <= num_seqs"
        )
    if qsl[nd] != nd:
        raise ValueError("each of the first num_decode_seqs sequences must have one query token")
    device = meta.block_tables.device
    for i in range(nd, meta.num_seqs):
        q_len = qsl[i + 1] - qsl[i]
        if q_len < 1 or meta.seq_lens[i] < q_len:
            raise ValueError(
                f"sequence {i}: query length {q_len} with seq_len {meta.seq_lens[i]} is invalid"
            )
    if native:
        # The kernel reads block_tables[s, t // block_size] for every t < seq_len: check the
        # width here, once per step, since C would read past the row.
        max_ctx = max(meta.seq_lens, default=0)
        if -(-max_ctx // meta.block_size) > meta.block_tables.shape[1]:
            raise ValueError(
                f"block_tables has {meta.block_tables.shape[1]} columns but a context of "
                f"{max_ctx} tokens needs {-(-max_ctx // meta.block_size)} blocks of "
                f"{meta.block_size}; widen block_tables"
            )
        if min(meta.seq_lens, default=1) < 1:
            raise ValueError("every sequence needs a seq_len of at least 1")
        if nd == meta.num_seqs:  # decode only: one row per sequence already
            tables, lens = meta.block_tables, meta.seq_lens_t
        else:
            query_lens = torch.tensor(
                [b - a for a, b in itertools.pairwise(qsl)], dtype=torch.int64, device=device
            )
            seq_of_token = torch.repeat_interleave(
                torch.arange(meta.num_seqs, device=device), query_lens
            )
            tables = meta.block_tables.index_select(0, seq_of_token)
            lens = meta.token_positions() + 1
        return AttentionPlan(
            num_cache_slots, num_kv_heads, native, [], [], tables, lens, gather_budget_rows
        )
    decodes = []
    for start, end in decode_groups(meta.seq_lens[:nd], num_kv_heads, gather_budget_rows):
        max_ctx = max(meta.seq_lens[start:end])
        slots = _slots_for_positions(meta, slice(start, end), max_ctx)
        pad = torch.arange(max_ctx, device=device) >= meta.seq_lens_t[start:end, None]
        # Padding keys point at the sequence's own first slot: always written, so finite, which
        # keeps 0 * garbage (NaN in uninitialised memory) out of the softmax-weighted sum.
        slots = torch.where(pad, slots[:, :1], slots)
        rows = _cache_rows(slots, num_cache_slots, num_kv_heads)
        decodes.append(DecodeBatch(start, end - start, max_ctx, rows, pad[:, None, None, :]))
    prefills = []
    for i in range(nd, meta.num_seqs):
        start_tok, end_tok, ctx = qsl[i], qsl[i + 1], meta.seq_lens[i]
        q_len = end_tok - start_tok
        if ctx == q_len:
            prefills.append(PrefillChunk(start_tok, end_tok, ctx, None))
            continue
        slots = _slots_for_positions(meta, slice(i, i + 1), ctx)
        rows = _cache_rows(slots, num_cache_slots, num_kv_heads)
        allowed = None
        if device.type in MASK_WITH_GQA_DEVICES:
            key_pos = torch.arange(ctx, device=device)
            allowed = key_pos <= torch.arange(ctx - q_len, ctx, device=device)[:, None]
        prefills.append(PrefillChunk(start_tok, end_tok, ctx, rows, allowed))
    return AttentionPlan(
        num_cache_slots,
        num_kv_heads,
        native,
        decodes,
        prefills,
        gather_budget_rows=gather_budget_rows,
    )


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    kv_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    gather_budget_bytes: int = DECODE_GATHER_BUDGET_BYTES,
    round_through: torch.dtype | None = None,
) -> torch.Tensor:
    """Write this step's K/V into `kv_cache`, then attend every query to its sequence's context.

    q [T, Hq, D], k and v [T, Hkv, D] (RoPE already applied to q and k); kv_cache
    [2, num_blocks, block_size, Hkv, D], contiguous, updated in place. Returns [T, Hq, D] in
    q's dtype. The cache may be in a narrower dtype than q (fp8: see engine/model/kv_dtype.py): it
    stores K / k_scale and V / v_scale, and every read is converted back to q's dtype. The
    scales are folded into the math rather than multiplied into the gathered K/V: k_scale
    into the softmax scale, v_scale into the attention output (both exact rewrites). A first
    prefill chunk attends to its own fresh K/V, so it never sees the cache's rounding.
    `gather_budget_bytes` bounds one decode group's gathered K/V (module docstring).
    `round_through`: an fp8 dtype whose storage a cache of q's dtype emulates (write_kv_cache).
    """
    head_dim = q.shape[2]
    num_kv_heads = k.shape[1]
    write_kv_cache(kv_cache, meta.slot_mapping, k, v, k_scale, v_scale, round_through)
    if meta.naive:
        return naive_paged_attention(
            q, kv_cache, meta.block_tables, meta.query_start_loc, meta.seq_lens,
            scale * k_scale, v_scale,
        )  # fmt: skip

    cache_rows = kv_cache.view(-1, head_dim)
    native = meta.native_decode and native_attention.supports(q, kv_cache)
    budget_rows = max(1, gather_budget_bytes // (head_dim * q.element_size()))
    plan = meta.plan(kv_cache.shape[1] * kv_cache.shape[2], num_kv_heads, native, budget_rows)
    if plan.token_tables is not None and plan.token_ctx_lens is not None:
        return native_attention.paged_decode_attention(
            q, kv_cache, plan.token_tables, plan.token_ctx_lens, scale * k_scale, v_scale
        )
    out = torch.empty_like(q)
    for group in plan.decodes:
        out[group.seq_start : group.seq_start + group.num_seqs] = _decode_attention(
            q, cache_rows, group, scale * k_scale, v_scale
        )
    # torch's CPU flash attention is ~40% slower in bf16 than in fp32 at these shapes (8 heads
    # of 32, 128 tokens): widen, attend, round once at the end (as accurate, or more).
    widen = q.device.type == "cpu" and q.dtype == torch.bfloat16
    for chunk in plan.prefills:
        out[chunk.token_start : chunk.token_end] = _prefill_attention(
            q, k, v, cache_rows, chunk, scale, k_scale, v_scale, widen
        )
    return out


def _prefill_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cache_rows: torch.Tensor,
    chunk: PrefillChunk,
    scale: float,
    k_scale: float,
    v_scale: float,
    widen: bool,
) -> torch.Tensor:
    """One prefill chunk's attention output [query_len, Hq, D] in q's dtype (paged_attention's
    tensors; `cache_rows` the cache viewed as [-1, D]); `widen`: attend in fp32."""
    num_heads, head_dim = q.shape[1], q.shape[2]
    num_kv_heads = k.shape[1]
    rows = slice(chunk.token_start, chunk.token_end)
    chunk_scale, out_scale = scale, 1.0
    query = q[rows].transpose(0, 1)[None]
    if chunk.kv_rows is None:  # a first chunk: its own K/V are the whole context
        keys, values = k[rows].transpose(0, 1)[None], v[rows].transpose(0, 1)[None]
        gqa, bias = num_heads != num_kv_heads, None
    else:  # queries at the end of a longer context (module docstring)
        kv = decode_kv(cache_rows.index_select(0, chunk.kv_rows), q.dtype)
        keys, values = kv.view(2, 1, num_kv_heads, -1, head_dim).unbind(0)
        chunk_scale, out_scale = scale * k_scale, v_scale
        if chunk.allowed is not None:  # this device's SDPA fuses a mask with GQA
            gqa, bias = num_heads != num_kv_heads, chunk.allowed
        else:  # lower-right causal; CUDA's fused kernels take no GQA with it
            if num_heads != num_kv_heads:
                group = num_heads // num_kv_heads
                keys = keys.repeat_interleave(group, dim=1)
                values = values.repeat_interleave(group, dim=1)
            gqa, bias = False, causal_lower_right(query.shape[2], chunk.ctx)
    if widen:
        query, keys, values = query.float(), keys.float(), values.float()
    attended = F.scaled_dot_product_attention(
        query,
        keys,
        values,
        attn_mask=bias,
        is_causal=chunk.kv_rows is None,
        scale=chunk_scale,
        enable_gqa=gqa,
    ).to(q.dtype)
    if out_scale != 1.0:
        attended = attended * out_scale
    return attended[0].transpose(0, 1)


def write_kv_cache(
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    round_through: torch.dtype | None = None,
) -> None:
    """Store k and v [T, Hkv, D] at flat slots `slot_mapping` [T] of `kv_cache`, in its dtype.

    An fp8 cache stores K / k_scale and V / v_scale saturated to the format's range
    (`encode_kv`), written through a uint8 view: CPU torch has no fp8 `index_copy_`.
    `round_through` (an fp8 dtype, with a cache in the model's dtype) stores exactly what such
    an fp8 cache would give back on a read: the fake-quantized reference that the fp8 path
    must equal (engine/model/kv_dtype.py, `emulate_kv_storage`).
    """
    num_tokens = k.shape[0]
    num_slots = kv_cache.shape[1] * kv_cache.shape[2]
    new_kv = torch.stack((k, v))
    if round_through is not None and not is_fp8(kv_cache.dtype):
        new_kv = decode_kv(encode_kv(new_kv, round_through, k_scale, v_scale), kv_cache.dtype)
    if is_fp8(kv_cache.dtype):
        new_kv = encode_kv(new_kv, kv_cache.dtype, k_scale, v_scale).view(torch.uint8)
        kv_cache = kv_cache.view(torch.uint8)
    else:
        new_kv = new_kv.to(kv_cache.dtype)
    kv_cache.view(2, num_slots, -1).index_copy_(1, slot_mapping, new_kv.view(2, num_tokens, -1))


def _decode_attention(
    q: torch.Tensor, cache_rows: torch.Tensor, batch: DecodeBatch, scale: float, v_scale: float
) -> torch.Tensor:
    """All decode queries in one batched op: [nd, Hq, D] from the gathered, padded context.
    `scale` is the softmax scale times the cache's K scale; the output is multiplied by the
    cache's V scale.

    A grouped matmul (the query heads of one KV head side by side) rather than sdpa: it never
    repeats K/V for GQA, and on CPU it measured as fast as sdpa in fp32 and ~4x faster in bf16
    (batch 100, context 256, tiny shapes), where sdpa's CPU kernel is slow.
    """
    nd, max_ctx = batch.num_seqs, batch.max_ctx
    num_heads, head_dim = q.shape[1], q.shape[2]
    kv = decode_kv(cache_rows.index_select(0, batch.kv_rows), q.dtype)
    keys, values = kv.view(2, nd, -1, max_ctx, head_dim).unbind(0)  # [nd, Hkv, ctx, D]
    first = batch.seq_start
    grouped_q = q[first : first + nd].view(nd, keys.shape[1], -1, head_dim)  # [nd, Hkv, group, D]
    # Softmax in fp32 like HF's eager attention, so bf16 runs stay close to the reference.
    scores = torch.matmul(grouped_q, keys.transpose(-1, -2)).float().mul_(scale)
    scores.masked_fill_(batch.pad_mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(q.dtype)
    out = torch.matmul(probs, values)
    if v_scale != 1.0:
        out.mul_(v_scale)
    return out.view(nd, num_heads, head_dim)
