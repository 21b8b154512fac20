"""Llama-family decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU) over a paged KV cache.

Numerics follow Hugging Face's LlamaForCausalLM (RMSNorm in fp32, rotate_half RoPE, cos/sin
computed in fp32 and cast to the activation dtype, fp32 attention softmax), so fp32 logits match
it to rounding. For speed the q/k/v projections are one fused matrix, as are gate/up;
`hf_weight_slots()` says where each Hugging Face tensor goes inside them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from engine.model import fused_step
from engine.model.attention import AttentionMetadata, paged_attention
from engine.native import activation as native_activation
from engine.native import norm as native_norm
from engine.native.linear import SmallBatchLinear, covers, small_batch_linear
from perfmodel.model_config import ModelConfig


class RMSNorm(nn.Module):
    """y = w * x / sqrt(mean(x^2) + eps), reduced in fp32 and cast back to x's dtype."""

    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    native: bool = False  # set by LlamaForCausalLM.use_custom_ops

    def add_norm(
        self, x: torch.Tensor, residual: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(self(x + residual), x + residual), or (self(x), x) without a residual: a pre-norm
        layer's residual add and norm, in one C call where custom ops are native."""
        if self.native and native_norm.covers(x, self.weight):
            return native_norm.fused_add_rms_norm(x, residual, self.weight, self.eps)
        if residual is not None:
            x = x + residual
        return self(x), x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # torch's fused rms_norm computes x * rsqrt(mean(x^2) + eps) bit for bit as the
        # unfused ops, in one kernel instead of six: at one token per step, op count is cost.
        # The weight multiplies after the cast back, as HF does, so bf16 rounds the same way.
        normed = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)
        return self.weight * normed.to(x.dtype)


def rope_inverse_frequencies(config: ModelConfig) -> torch.Tensor:
    """Per-pair rotation frequencies (radians per position), fp32 [head_dim // 2].

    With llama3 rope_scaling, long wavelengths (beyond original_max / low_freq_factor) are
    divided by `factor`, short ones (below original_max / high_freq_factor) are kept, and the
    band between is interpolated linearly in original_max / wavelength.
    """
    dim = config.head_dim
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    inv_freq = 1.0 / (config.rope_theta**exponents)
    scaling = config.rope_scaling
    if scaling is None:
        return inv_freq
    factor = float(scaling["factor"])
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    original_max = float(scaling["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > original_max / low, inv_freq / factor, inv_freq)
    smooth = (original_max / wavelen - low) / (high - low)
    interpolated = (1 - smooth) * scaled / factor + smooth * scaled
    in_band = (wavelen >= original_max / high) & (wavelen <= original_max / low)
    return torch.where(in_band, interpolated, scaled)


class RotaryEmbedding(nn.Module):
    """cos/sin tables for every position up to max_position_embeddings, computed once in fp32.

    The tables are plain attributes, not buffers, so `model.to(bfloat16)` cannot round them and
    a model built on the meta device still gets real tables; they follow the positions' device.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self._tables: tuple[torch.Tensor, torch.Tensor] | None = None

    def _build(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(self.config.max_position_embeddings, dtype=torch.int64).float()
        angles = torch.outer(positions, rope_inverse_frequencies(self.config))
        # HF's full-width cos = cat(c, c); sin carries rotate_half's sign: cat(-s, s).
        cos, sin = angles.cos(), angles.sin()
        return torch.cat((cos, cos), -1).to(device), torch.cat((-sin, sin), -1).to(device)

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """cos and signed sin (see apply_rotary) for `positions` [T], each [T, 1, head_dim] in
        `dtype`."""
        if self._tables is None or self._tables[0].device != positions.device:
            self._tables = self._build(positions.device)
        cos, sin = self._tables
        return cos[positions, None].to(dtype), sin[positions, None].to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """HF's x * cos + rotate_half(x) * sin for x [T, heads, head_dim], with rotate_half(x) =
    cat(-x2, x1), in four ops: the sign lives in the table (sin = cat(-s, s)) and the halves
    swap with roll. Bit for bit HF's: x2 * -s is -(x2 * s), and a + -b is a - b."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin


class LlamaAttention(nn.Module):
    """Grouped-query self-attention: fused qkv projection, RoPE on q and k, paged attention."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.scale = config.head_dim**-0.5
        # Fixed fp8 KV cache scales (the cache holds K / k_scale, V / v_scale; kv_dtype.py).
        # Plain floats, not buffers: no weight bytes, and never cast by model.to().
        self.k_scale = 1.0
        self.v_scale = 1.0
        # An fp8 dtype whose cache a cache in the model's dtype emulates (None: store as is):
        # the reference an fp8 cache's logits are checked against (emulate_kv_storage).
        self.kv_round_through: torch.dtype | None = None
        qkv_rows = (self.num_heads + 2 * self.num_kv_heads) * self.head_dim
        self.qkv_proj = SmallBatchLinear(config.hidden_size, qkv_rows, bias=False)
        self.o_proj = SmallBatchLinear(
            self.num_heads * self.head_dim, config.hidden_size, bias=False
        )

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        kv_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        num_tokens = x.shape[0]
        qkv = self.qkv_proj(x).view(num_tokens, -1, self.head_dim)
        qk_heads = self.num_heads + self.num_kv_heads
        qk = apply_rotary(qkv[:, :qk_heads], cos, sin)  # q and k rotated in one pass
        q, k, v = qk[:, : self.num_heads], qk[:, self.num_heads :], qkv[:, qk_heads:]
        attended = paged_attention(
            q, k, v, kv_cache, meta, self.scale, k_scale=self.k_scale, v_scale=self.v_scale,
            round_through=self.kv_round_through,
        )  # fmt: skip
        return self.o_proj(attended.reshape(num_tokens, -1))


class LlamaMLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x)), with gate and up fused into one matmul."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.intermediate_size = config.intermediate_size
        self.gate_up_proj = SmallBatchLinear(
            config.hidden_size, 2 * config.intermediate_size, bias=False
        )
        self.down_proj = SmallBatchLinear(config.intermediate_size, config.hidden_size, bias=False)

    native: bool = False  # set by LlamaForCausalLM.use_custom_ops

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = self.gate_up_proj(x)
        if self.native and native_activation.covers(gate_up):
            return self.down_proj(native_activation.silu_and_mul(gate_up))
        gate, up = gate_up.split(self.intermediate_size, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class LlamaDecoderLayer(nn.Module):
    """Pre-norm block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = LlamaAttention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = LlamaMLP(config)

    def forward(
        self,
        x: torch.Tensor,
        residual: torch.Tensor | None,
        cos: torch.Tensor,
        sin: torch.Tensor,
        kv_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(this layer's output, the residual stream before it is added), as vLLM passes
        them, so that each residual add fuses with the next norm; residual None for the
        first layer. The sum of the two is HF's hidden state after the layer."""
        hidden, residual = self.input_layernorm.add_norm(x, residual)
        hidden = self.self_attn(hidden, cos, sin, kv_cache, meta)
        hidden, residual = self.post_attention_layernorm.add_norm(hidden, residual)
        return self.mlp(hidden), residual


@dataclass(frozen=True)
class WeightSlot:
    """Where a Hugging Face tensor lands: rows [row_start, row_start + shape[0]) of `param`."""

    param: nn.Parameter
    row_start: int
    shape: tuple[int, ...]


class LlamaForCausalLM(nn.Module):
    """The decoder stack plus LM head. Weights are created on the default device and dtype;
    use `engine.model.weights.load_model` to build, place and fill one."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            LlamaDecoderLayer(config) for _ in range(config.num_hidden_layers)
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = RotaryEmbedding(config)
        self.native_ops = False  # see use_custom_ops
        # The torch path's layers in few operators (fused_step.py) where they cover the model;
        # False runs the plain layers, the reference they are measured against.
        self.fused_layers = True
        # A tied model has no lm_head parameter at all (see lm_head_weight), so moving or
        # re-materialising the module can never untie it.
        self.lm_head = (
            None
            if config.tie_word_embeddings
            else nn.Parameter(torch.empty(config.vocab_size, config.hidden_size))
        )

    @property
    def lm_head_weight(self) -> nn.Parameter:
        """The output projection [vocab_size, hidden_size]: the embedding matrix when tied."""
        return self.embed_tokens.weight if self.lm_head is None else self.lm_head

    def set_kv_scales(self, k_scales: Sequence[float], v_scales: Sequence[float]) -> None:
        """Install fixed per-layer K and V scales of an fp8 KV cache (positive floats, one per
        layer; engine.model.kv_dtype). Call before any K/V is written: entries already cached
        keep the scale they were written with."""
        layers = self.layers
        if not len(k_scales) == len(v_scales) == len(layers):
            raise ValueError(
                f"need one K and one V scale per layer ({len(layers)}), "
                f"got {len(k_scales)} and {len(v_scales)}"
            )
        for i, (layer, k, v) in enumerate(zip(layers, k_scales, v_scales, strict=True)):
            if not (k > 0 and v > 0):
                raise ValueError(f"layer {i}: KV scales must be positive, got k={k}, v={v}")
            layer.self_attn.k_scale, layer.self_attn.v_scale = float(k), float(v)

    def emulate_kv_storage(self, dtype: torch.dtype | None) -> None:
        """Store every layer's K/V rounded through fp8 ``dtype`` (with the layers' K and V
        scales) in a cache of the model's own dtype, so that attention reads what an fp8 cache
        would give back: the fake-quantized reference of ``kv_cache_dtype="fp8"``. None
        stores K/V as they are. Needs the torch attention path: the C decode stack writes its
        cache itself (engine/model/decode_stack.py)."""
        for layer in self.layers:
            layer.self_attn.kv_round_through = dtype

    def kv_scales(self) -> tuple[list[float], list[float]]:
        """The per-layer (K scales, V scales) the attention layers use."""
        attns = [layer.self_attn for layer in self.layers]
        return [a.k_scale for a in attns], [a.v_scale for a in attns]

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: list[torch.Tensor],
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        """Run one engine step: input_ids and positions int64 [T] in batch order (see
        AttentionMetadata), one cache per layer. Writes the step's K/V into the caches and
        returns the final-normed hidden states [T, hidden_size]; pass the rows to sample to
        `compute_logits`."""
        if len(kv_caches) != len(self.layers):
            raise ValueError(f"got {len(kv_caches)} KV caches for {len(self.layers)} layers")
        if input_ids.dim() != 1 or positions.shape != input_ids.shape:
            raise ValueError(
                f"input_ids {tuple(input_ids.shape)} and positions {tuple(positions.shape)} "
                "must both be 1-D [num_tokens]: flatten the batch as AttentionMetadata describes"
            )
        x = self.embed_tokens(input_ids)
        if self.fused_layers and fused_step.covers(self):
            step = fused_step.FusedStep(self, positions, kv_caches, meta, x.dtype)
            for layer, kv_cache in zip(self.layers, kv_caches, strict=True):
                step.layer(layer, x, kv_cache)
            return step.rms_norm(self.norm, x)
        cos, sin = self.rotary(positions, x.dtype)
        residual = None
        for layer, kv_cache in zip(self.layers, kv_caches, strict=True):
            x, residual = layer(x, residual, cos, sin, kv_cache, meta)
        return self.norm.add_norm(x, residual)[0]

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits [N, vocab_size] in fp32 for hidden states [N, hidden_size]."""
        weight = self.lm_head_weight
        if self.native_ops and covers(hidden, weight):
            return small_batch_linear(hidden, weight).float()
        return F.linear(hidden, weight).float()

    def use_custom_ops(self, on: bool) -> None:
        """Run linear layers (and the LM head) of 1..4 rows, each residual add + RMSNorm and
        each SwiGLU activation in the C kernels (engine/native/linear.py, norm.py,
        activation.py), or in torch ops."""
        self.native_ops = on
        for module in self.modules():
            if isinstance(module, (SmallBatchLinear, RMSNorm, LlamaMLP)):
                module.native = on

    def hf_weight_slots(self) -> dict[str, WeightSlot]:
        """Map every Hugging Face Llama tensor name this model needs to its place in our
        (fused) parameters. A tied model has no 'lm_head.weight' entry."""
        c = self.config
        q_rows, kv_rows = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
        h = c.hidden_size
        slots = {
            "model.embed_tokens.weight": WeightSlot(self.embed_tokens.weight, 0, (c.vocab_size, h))
        }
        for i, layer in enumerate(self.layers):
            p = f"model.layers.{i}."
            qkv, gate_up = layer.self_attn.qkv_proj.weight, layer.mlp.gate_up_proj.weight
            slots[p + "self_attn.q_proj.weight"] = WeightSlot(qkv, 0, (q_rows, h))
            slots[p + "self_attn.k_proj.weight"] = WeightSlot(qkv, q_rows, (kv_rows, h))
            slots[p + "self_attn.v_proj.weight"] = WeightSlot(qkv, q_rows + kv_rows, (kv_rows, h))
            slots[p + "self_attn.o_proj.weight"] = WeightSlot(
                layer.self_attn.o_proj.weight, 0, (h, q_rows)
            )
            inter = c.intermediate_size
            slots[p + "mlp.gate_proj.weight"] = WeightSlot(gate_up, 0, (inter, h))
            slots[p + "mlp.up_proj.weight"] = WeightSlot(gate_up, inter, (inter, h))
            slots[p + "mlp.down_proj.weight"] = WeightSlot(
                layer.mlp.down_proj.weight, 0, (h, inter)
            )
            for norm in ("input_layernorm", "post_attention_layernorm"):
                slots[p + norm + ".weight"] = WeightSlot(getattr(layer, norm).weight, 0, (h,))
        slots["model.norm.weight"] = WeightSlot(self.norm.weight, 0, (h,))
        if not c.tie_word_embeddings:
            slots["lm_head.weight"] = WeightSlot(self.lm_head_weight, 0, (c.vocab_size, h))
        return slots
