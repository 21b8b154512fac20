"""The torch path's decoder layers in few operators: per-step state built once, then ~33 per layer.

At one token per sequence a step's cost on a GPU is the host's, one dispatch per operator (and
on a CPU, at small widths, the same). The plain layers of engine/model/llama.py spend ~97 leaf
aten operators per layer on casts, views, the residual adds, RMSNorm's pieces, rotate_half,
stacking K and V, and a decode attention that rebuilds its views every layer. Here, for a
model whose linear layers are float and whose custom ops are torch's:

  * everything derived from the step alone is built once, before the first layer, in
    `FusedStep`: the rotary tables widened to every head of the fused qkv row (cos 1, sin 0
    for the V heads, which then pass unchanged), the output buffers every layer writes into
    (qkv, rotated qkv, attention output, gate/up) and their views, the decode groups' gather
    buffers, K^T / V views and additive masks;
  * the residual stream is one tensor updated in place: the o and down projections add into
    it (`addmm_`), so no layer adds a residual of its own;
  * RMSNorm is x / hypot(||x||, sqrt(h * eps)) * (w * sqrt(h)) (float32: four operators), and
    RoPE is one flip of the halves, a multiply and an `addcmul_` over the whole qkv row;
  * the step's K and V are written by one `index_copy_` straight from the rotated row.
Numerics are HF's up to rounding (float32 greedy tokens identical, logits within 1e-4; tests
in tests/engine/model/test_fused_step.py). Steps the fast decode attention does not cover (an
fp8 cache, the naive or the C attention) keep engine/model/attention.py's `paged_attention`,
fed views of the same rotated row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.model.attention import (
    DECODE_GATHER_BUDGET_BYTES,
    AttentionMetadata,
    DecodeBatch,
    _prefill_attention,
    paged_attention,
)
from engine.native import attention as native_attention
from engine.native.linear import SmallBatchLinear


def transposed(linear: SmallBatchLinear) -> torch.Tensor:
    """The weight [out, in] as a [in, out] view, made once per weight storage (a `.t()` per
    call is one more operator)."""
    weight = linear.weight
    cached = linear.__dict__.get("_t_cache")
    if cached is None or cached[0] != weight.data_ptr():
        cached = linear.__dict__["_t_cache"] = (weight.data_ptr(), weight.detach().t())
    return cached[1]


def cache_views(attn: torch.nn.Module, kv_cache: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The cache [2, blocks, block_size, Hkv, D] as rows [-1, D] (for gathers) and as planes
    [2, slots, Hkv * D] (for the K/V write), made once per cache."""
    cached = attn.__dict__.get("_cache_views")
    if cached is None or cached[0] != kv_cache.data_ptr():
        slots = kv_cache.shape[1] * kv_cache.shape[2]
        views = (kv_cache.view(-1, kv_cache.shape[-1]), kv_cache.view(2, slots, -1))
        cached = attn.__dict__["_cache_views"] = (kv_cache.data_ptr(), *views)
    return cached[1:]


@dataclass
class _DecodeGroup:
    """One decode group's buffers and views (see AttentionPlan's DecodeBatch)."""

    rows: torch.Tensor  # cache rows to gather, [2 * n * Hkv * ctx]
    gathered: torch.Tensor  # [2 * n * Hkv * ctx, D], written by every layer
    keys_t: torch.Tensor  # [n * Hkv, D, ctx] view of gathered
    values: torch.Tensor  # [n * Hkv, ctx, D] view of gathered
    bias: torch.Tensor  # [n * Hkv, 1, ctx]: 0, or -inf where a key is padding
    q_src: torch.Tensor  # [n, Hkv, group, D] view of the rotated row's query heads
    q_buf: torch.Tensor | None  # contiguous copy target when n > 1, else None
    q: torch.Tensor  # [n * Hkv, group, D]: q_src's own view (n == 1) or q_buf
    out: torch.Tensor  # [n * Hkv, group, D] view of the step's attention output


class FusedStep:
    """A forward's shared state (module docstring). Build one per forward, before the layers."""

    def __init__(
        self,
        model: torch.nn.Module,
        positions: torch.Tensor,
        kv_caches: list[torch.Tensor],
        meta: AttentionMetadata,
        dtype: torch.dtype,
    ) -> None:
        c = model.config
        attn0 = model.layers[0].self_attn
        self.meta, self.dtype = meta, dtype
        t, device = positions.shape[0], positions.device
        hq, hkv, d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.hq, self.hkv, self.d, self.scale = hq, hkv, d, attn0.scale
        heads = hq + 2 * hkv
        empty = torch.empty
        # RoPE tables over the whole qkv row; the sign of rotate_half lives in sin.
        cos_t, sin_t = model.rotary(positions, dtype)  # [T, 1, D] each
        self.cos = torch.ones((t, heads, d), dtype=dtype, device=device)
        self.sin = torch.zeros((t, heads, d), dtype=dtype, device=device)
        self.cos[:, : hq + hkv] = cos_t
        self.sin[:, : hq + hkv] = sin_t
        self.cos, self.sin = self.cos.view(t, heads, 2, d // 2), self.sin.view(t, heads, 2, d // 2)
        self.qkv = empty((t, heads * d), dtype=dtype, device=device)
        self.qkv4 = self.qkv.view(t, heads, 2, d // 2)
        self.rot = empty((t, heads, 2, d // 2), dtype=dtype, device=device)
        rot3 = self.rot.view(t, heads, d)
        self.q, self.k, self.v = rot3[:, :hq], rot3[:, hq : hq + hkv], rot3[:, hq + hkv :]
        self.kv_src = self.rot.view(t, heads * d)[:, hq * d :].view(t, 2, hkv * d).transpose(0, 1)
        self.out = empty((t, hq * d), dtype=dtype, device=device)
        self.out3 = self.out.view(t, hq, d)
        inter = c.intermediate_size
        self.gate_up = empty((t, 2 * inter), dtype=dtype, device=device)
        self.gate, self.up = self.gate_up[:, :inter], self.gate_up[:, inter:]
        self.norm_const = _norm_constant(model.norm, c.hidden_size, device)
        self.inv_sqrt_hidden = 1.0 / math.sqrt(c.hidden_size)
        self.sqrt_hidden = math.sqrt(c.hidden_size)
        cache = kv_caches[0]
        # The fast attention below reads a cache of the model's dtype with torch ops; an fp8
        # cache, the naive baseline and the C kernel keep paged_attention.
        native = meta.native_decode and native_attention.supports(self.q, cache)
        # A cache emulating an fp8 one (LlamaForCausalLM.emulate_kv_storage) rounds what it
        # stores: paged_attention's write does that.
        emulating = any(layer.self_attn.kv_round_through is not None for layer in model.layers)
        self.fast_attention = (
            cache.dtype == dtype and not meta.naive and not native and not emulating
        )
        self.groups: list[_DecodeGroup] = []
        if self.fast_attention:
            budget = max(1, DECODE_GATHER_BUDGET_BYTES // (d * self.qkv.element_size()))
            self.plan = meta.plan(cache.shape[1] * cache.shape[2], hkv, False, budget)
            self.groups = [self._group(g) for g in self.plan.decodes]
        self.widen = device.type == "cpu" and dtype == torch.bfloat16

    def _group(self, batch: DecodeBatch) -> _DecodeGroup:
        n, ctx, start = batch.num_seqs, batch.max_ctx, batch.seq_start
        hkv, d, group = self.hkv, self.d, self.hq // self.hkv
        rows = batch.kv_rows
        gathered = torch.empty((rows.shape[0], d), dtype=self.dtype, device=rows.device)
        keys_t = gathered.as_strided((n * hkv, d, ctx), (ctx * d, 1, d))
        values = gathered.as_strided((n * hkv, ctx, d), (ctx * d, d, 1), n * hkv * ctx * d)
        pad = batch.pad_mask.view(n, 1, 1, ctx)
        bias = torch.zeros((n, hkv, 1, ctx), dtype=self.dtype, device=rows.device)
        bias = bias.masked_fill_(pad, float("-inf")).view(n * hkv, 1, ctx)
        q_src = self.q[start : start + n].unflatten(1, (hkv, group))
        q_buf = None if n == 1 else torch.empty_like(q_src, memory_format=torch.contiguous_format)
        q = q_src.view(hkv, group, d) if q_buf is None else q_buf.view(n * hkv, group, d)
        out = self.out[start : start + n].view(n * hkv, group, d)
        return _DecodeGroup(rows, gathered, keys_t, values, bias, q_src, q_buf, q, out)

    def rms_norm(self, norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        """HF's RMSNorm of x [T, h] (reduced in fp32), as a new tensor of x's dtype."""
        if x.dtype == torch.float32:
            n = torch.linalg.vector_norm(x, dim=-1, keepdim=True).hypot_(self.norm_const)
            return torch.div(x, n).mul_(_scaled_weight(norm, self.sqrt_hidden))
        n = torch.linalg.vector_norm(x, dim=-1, keepdim=True, dtype=torch.float32)
        n.hypot_(self.norm_const).mul_(self.inv_sqrt_hidden)
        return torch.div(x, n).to(x.dtype).mul_(norm.weight)

    def layer(self, layer: torch.nn.Module, residual: torch.Tensor, kv_cache: torch.Tensor) -> None:
        """Run one decoder layer, adding its two outputs into `residual` [T, h] in place."""
        attn, mlp = layer.self_attn, layer.mlp
        h = self.rms_norm(layer.input_layernorm, residual)
        torch.mm(h, transposed(attn.qkv_proj), out=self.qkv)
        flipped = self.qkv4.flip(2)  # rotate_half without its sign (that is in self.sin)
        torch.mul(self.qkv4, self.cos, out=self.rot).addcmul_(flipped, self.sin)
        self._attend(attn, kv_cache)
        residual.addmm_(self.out, transposed(attn.o_proj))
        h = self.rms_norm(layer.post_attention_layernorm, residual)
        torch.mm(h, transposed(mlp.gate_up_proj), out=self.gate_up)
        F.silu(self.gate, inplace=True).mul_(self.up)
        residual.addmm_(self.gate, transposed(mlp.down_proj))

    def _attend(self, attn: torch.nn.Module, kv_cache: torch.Tensor) -> None:
        """Write the step's K/V into `kv_cache` and the attention output into self.out."""
        if not self.fast_attention:
            self.out3.copy_(
                paged_attention(
                    self.q, self.k, self.v, kv_cache, self.meta, self.scale,
                    k_scale=attn.k_scale, v_scale=attn.v_scale,
                    round_through=attn.kv_round_through,
                )
            )  # fmt: skip
            return
        rows, planes = cache_views(attn, kv_cache)
        planes.index_copy_(1, self.meta.slot_mapping, self.kv_src)
        for g in self.groups:
            if g.q_buf is not None:
                g.q_buf.copy_(g.q_src)
            torch.index_select(rows, 0, g.rows, out=g.gathered)
            scores = torch.baddbmm(g.bias, g.q, g.keys_t, alpha=self.scale)
            if self.dtype == torch.float32:
                probs = torch.softmax(scores, dim=-1)
            else:  # softmax in fp32, as HF's eager attention
                probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(self.dtype)
            torch.bmm(probs, g.values, out=g.out)
        for chunk in self.plan.prefills:
            self.out3[chunk.token_start : chunk.token_end] = _prefill_attention(
                self.q, self.k, self.v, rows, chunk, self.scale, 1.0, 1.0, self.widen
            )


def _scaled_weight(norm: torch.nn.Module, factor: float) -> torch.Tensor:
    """norm.weight * factor, made once per weight (and again if the weight is written)."""
    w = norm.weight
    key = (w.data_ptr(), w._version, factor)
    cached = norm.__dict__.get("_scaled_cache")
    if cached is None or cached[0] != key:
        cached = norm.__dict__["_scaled_cache"] = (key, w.detach() * factor)
    return cached[1]


def _norm_constant(norm: torch.nn.Module, hidden: int, device: torch.device) -> torch.Tensor:
    """sqrt(hidden * eps) as a 0-dim fp32 tensor on `device`, made once: a CUDA graph capture
    cannot copy a host scalar to the device."""
    cached = norm.__dict__.get("_constant_cache")
    if cached is None or cached[0] != device:
        value = torch.tensor(math.sqrt(hidden * norm.eps), device=device)
        cached = norm.__dict__["_constant_cache"] = (device, value)
    return cached[1]


def covers(model: torch.nn.Module) -> bool:
    """Whether the fused layers run this model: torch custom ops, float linear layers without
    bias (quantized layers keep their own kernels in the plain layers)."""
    if model.native_ops:
        return False
    if torch.is_grad_enabled() and any(p.requires_grad for p in model.parameters()):
        return False  # out= matmuls refuse autograd; the engine runs under inference_mode
    for layer in model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        for linear in (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj):
            if type(linear) is not SmallBatchLinear or linear.bias is not None:
                return False
    return True
