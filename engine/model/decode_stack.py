"""The whole decoder stack of a decode step of 1..4 sequences in one C call:
engine/native/csrc/decode_stack.c.

At one token per step the torch model spends most of its time dispatching ~120 small operators
(3 to 5 us each) and running the Python between them, not computing. The C stack chains the
same kernels the torch path calls for its linear layers, norms and attention, and does RoPE,
the K/V write and SwiGLU itself, rounding as torch does. The model runner takes this path for
pure decode steps it covers (`DecodeStack.covers`) and the torch model for every other step.
"""

from __future__ import annotations

import ctypes

import torch

from engine.model.attention import AttentionMetadata
from engine.model.llama import LlamaForCausalLM
from engine.native.lib import SUFFIX, load
from engine.native.linear import MAX_ROWS, SmallBatchLinear

# The order of a layer's pointers and of the shape, as the enums in decode_stack.c.
LAYER_TENSORS = ("input_norm", "qkv", "o", "post_norm", "gate_up", "down", "kv_cache")
DIMS = ("hidden", "heads", "kv_heads", "head_dim", "intermediate", "num_blocks", "block_size")


def why_not(model: LlamaForCausalLM, kv_caches: list[torch.Tensor]) -> str | None:
    """None when the C stack computes this model's decode steps, else the reason it does not:
    a CPU float32/bfloat16 model whose linear layers are unquantized, with caches of its own
    dtype (no fp8 scales) and widths the kernels take (multiples of 16, an even head_dim)."""
    c = model.config
    dtype, device = model.embed_tokens.weight.dtype, model.embed_tokens.weight.device
    if device.type != "cpu" or dtype not in SUFFIX:
        return f"it covers CPU float32/bfloat16 models, not {dtype} on {device}"
    for width, name in ((c.hidden_size, "hidden_size"), (c.intermediate_size, "intermediate_size"),
                        (c.num_attention_heads * c.head_dim, "num_heads * head_dim")):  # fmt: skip
        if width % 16:
            return f"{name} {width} is not a multiple of 16"
    if c.head_dim % 2 or c.num_attention_heads % c.num_key_value_heads:
        return f"head_dim {c.head_dim} must be even and num_heads a multiple of num_kv_heads"
    for layer, cache in zip(model.layers, kv_caches, strict=True):
        attn, mlp = layer.self_attn, layer.mlp
        linears = (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)
        if not all(type(m) is SmallBatchLinear and m.weight.dtype == dtype for m in linears):
            return "its linear layers are quantized (the C stack runs float weights only)"
        if cache.dtype != dtype or not cache.is_contiguous():
            return f"the KV cache is {cache.dtype}, not the model's {dtype}"
        if attn.k_scale != 1.0 or attn.v_scale != 1.0:
            return "the KV cache has scales (an fp8 cache)"
        if attn.kv_round_through is not None:
            return "it emulates an fp8 cache (LlamaForCausalLM.emulate_kv_storage)"
    return None


class DecodeStack:
    """One model's decoder stack in C, over its KV caches. Build it only where `why_not` is
    None; it keeps references to every tensor whose address it holds."""

    def __init__(self, model: LlamaForCausalLM, kv_caches: list[torch.Tensor]) -> None:
        reason = why_not(model, kv_caches)
        if reason is not None:
            raise ValueError(f"the C decode stack cannot run this model: {reason}")
        lib = load()
        c = model.config
        self.dtype = model.embed_tokens.weight.dtype
        self._fn = getattr(lib, f"decode_stack_{SUFFIX[self.dtype]}")
        layout = (lib.decode_stack_ptrs_per_layer(), lib.decode_stack_num_dims())
        if layout != (len(LAYER_TENSORS), len(DIMS)):
            raise RuntimeError(
                "engine/native/csrc/decode_stack.c and its Python side disagree on layout"
            )
        tensors: list[torch.Tensor] = []
        for layer, cache in zip(model.layers, kv_caches, strict=True):
            tensors += [
                layer.input_layernorm.weight, layer.self_attn.qkv_proj.weight,
                layer.self_attn.o_proj.weight, layer.post_attention_layernorm.weight,
                layer.mlp.gate_up_proj.weight, layer.mlp.down_proj.weight, cache,
            ]  # fmt: skip
        tensors = [t.detach() for t in tensors]
        if not all(t.is_contiguous() for t in tensors):
            raise ValueError("the C decode stack needs contiguous weights")
        # The same tables (and the same rounding to the model's dtype) as RotaryEmbedding.
        cos, sin = model.rotary._build(torch.device("cpu"))
        self._cos, self._sin = cos.to(self.dtype).contiguous(), sin.to(self.dtype).contiguous()
        self._embed = model.embed_tokens.weight.detach()
        self._final_norm = model.norm.weight.detach()
        self._keep = tensors
        self._layer_ptrs = (ctypes.c_void_p * len(tensors))(*(t.data_ptr() for t in tensors))
        cache = kv_caches[0]
        dims = (c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
                c.intermediate_size, cache.shape[1], cache.shape[2])  # fmt: skip
        self._dims = (ctypes.c_int64 * len(dims))(*dims)
        self.hidden_size = c.hidden_size
        self.num_layers = len(model.layers)
        self.eps = float(model.norm.eps)
        self.scale = float(model.layers[0].self_attn.scale)
        self.max_position = cos.shape[0]
        self.vocab_size = self._embed.shape[0]

    @staticmethod
    def covers(input_ids: torch.Tensor, meta: AttentionMetadata) -> bool:
        """A step of 1..MAX_ROWS sequences, each decoding one token, with native attention."""
        n = input_ids.shape[0]
        return (
            meta.native_decode and 1 <= n <= MAX_ROWS and meta.num_decode_seqs == n == meta.num_seqs
        )

    def __call__(
        self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        """As LlamaForCausalLM.forward for a covered step: writes the step's K/V into the
        caches and returns the final-normed hidden states [m, hidden_size]."""
        m = input_ids.shape[0]
        # The C side indexes tables with these without bounds checks; torch's ops would raise.
        if int(positions.max()) >= self.max_position or int(input_ids.max()) >= self.vocab_size:
            raise IndexError(
                f"token ids {input_ids.tolist()} or positions {positions.tolist()} are past the "
                f"vocabulary ({self.vocab_size}) or the RoPE table ({self.max_position})"
            )
        tables, seq_lens = meta.block_tables.contiguous(), meta.seq_lens_t.contiguous()
        slots = meta.slot_mapping.contiguous()
        ids, pos = input_ids.contiguous(), positions.contiguous()
        out = torch.empty((m, self.hidden_size), dtype=self.dtype)
        rc = self._fn(
            self._layer_ptrs, self.num_layers, self._embed.data_ptr(), self._final_norm.data_ptr(),
            self._cos.data_ptr(), self._sin.data_ptr(), ids.data_ptr(), pos.data_ptr(),
            slots.data_ptr(), tables.data_ptr(), tables.shape[1], seq_lens.data_ptr(),
            out.data_ptr(), m, self._dims, self.eps, self.scale, torch.get_num_threads(),
        )  # fmt: skip
        if rc != 0:
            raise MemoryError("the C decode stack could not allocate its buffers")
        return out
