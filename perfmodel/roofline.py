"""The analytic model: FLOPs and bytes of one engine step of a Llama-family decoder.

Inputs are the model shape (perfmodel.model_config.ModelConfig), the dtypes of weights, KV cache and
activations, the tensor-parallel degree, and the batch composition of the step: per sequence, its
new tokens q and its context length c after the step (c - q tokens were already cached). Every
figure is per GPU under tensor parallelism (Megatron sharding: attention heads, MLP columns and
the vocabulary split over ``tp`` GPUs; KV heads replicated when ``tp`` exceeds them, as vLLM does).

FLOPs count matmuls only, two per multiply-add:
  linear     2 * (params of the q/k/v, o, gate/up and down projections) per new token, per layer
  attention  4 * heads * head_dim per (query, key) pair, per layer (QK^T and PV); with
             ``causal=True`` a chunk of q tokens at context c attends q*c - q*(q-1)/2 pairs (the
             work flash attention does); ``causal=False`` counts the full q x c rectangle that an
             unfused sdpa call computes
  lm_head    2 * hidden * vocab per row that is turned into logits (one per sampled sequence)
Norms, RoPE, SiLU and softmax add O(hidden) FLOPs per token and are left out.

Bytes count what crosses the memory bus once per step:
  weights      every projection and the LM head read once per step, however many tokens share
               them (embedding rows are gathered per token and counted as activations)
  KV read      the cached context, c - q tokens per sequence, read once per layer
  KV write     the new tokens' K and V
  activations  the inputs and outputs of each operation, unfused (norm, qkv, RoPE, attention,
               o_proj, residual adds, gate/up, SiLU-mul, down), plus fp32 logits: an upper bound
               where an engine fuses kernels
Tensor-parallel all-reduce traffic is reported apart (``comm_bytes``), not added to memory bytes.

All arithmetic is element-wise, so a Batch of numpy arrays (one entry per step, as in
steps.parquet) gives a StepCost of arrays.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from perfmodel.files import JSONObject
from perfmodel.model_config import ModelConfig
from perfmodel.models import dtype_bytes, short_dtype

Number = Any  # a float or a numpy array of them


@dataclass(frozen=True)
class Precision:
    """Dtypes of the weights, the KV cache and the activations (the matmuls' compute dtype)."""

    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    activation_dtype: str = "bf16"

    def __post_init__(self) -> None:
        for f in fields(self):
            dtype_bytes(getattr(self, f.name))  # raises naming the known dtypes

    @classmethod
    def for_model(
        cls,
        config: ModelConfig,
        weight_dtype: str | None = None,
        kv_dtype: str | None = None,
        activation_dtype: str | None = None,
    ) -> Precision:
        """Defaults from the checkpoint's dtype; weight-only int8/int4 keep float activations."""
        base = short_dtype(config.dtype)
        weights = short_dtype(weight_dtype or base)
        acts = short_dtype(activation_dtype or (base if weights in ("int4", "int8") else weights))
        return cls(weights, short_dtype(kv_dtype or acts), acts)

    def to_dict(self) -> dict[str, str]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Batch:
    """The composition of one step, as aggregates (numbers, or arrays with one entry per step).

    num_tokens: new tokens (prefill chunk tokens plus one per decode)
    num_seqs: sequences in the step; num_logits: rows that go through the LM head
    cached_tokens: sum over sequences of c - q, the context read from the KV cache
    attn_pairs: (query, key) pairs attended
    """

    num_tokens: Number
    num_seqs: Number
    num_logits: Number
    cached_tokens: Number
    attn_pairs: Number

    @classmethod
    def from_chunks(cls, chunks: Iterable[tuple[int, int]], causal: bool = True) -> Batch:
        """From (new tokens q, context after the step c) per sequence; every sequence samples."""
        tokens = seqs = cached = pairs = 0
        for q, c in chunks:
            if not 1 <= q <= c:
                raise ValueError(f"a sequence needs 1 <= new tokens <= context, got q={q}, c={c}")
            tokens, seqs, cached = tokens + q, seqs + 1, cached + c - q
            pairs += q * c - (q * (q - 1) // 2 if causal else 0)
        return cls(tokens, seqs, seqs, cached, pairs)

    @classmethod
    def decode(cls, batch_size: int, context_tokens: int) -> Batch:
        """``batch_size`` sequences generating one token each at context ``context_tokens``."""
        return cls.from_chunks([(1, context_tokens)] * batch_size)

    @classmethod
    def prefill(cls, prompt_tokens: int, num_seqs: int = 1) -> Batch:
        """``num_seqs`` whole prompts of ``prompt_tokens`` each, from an empty cache."""
        return cls.from_chunks([(prompt_tokens, prompt_tokens)] * num_seqs)


@dataclass(frozen=True)
class StepCost:
    """FLOPs and bytes of one step on one GPU (numbers or arrays, like the Batch)."""

    linear_flops: Number
    attention_flops: Number
    lm_head_flops: Number
    weight_bytes: Number
    kv_read_bytes: Number
    kv_write_bytes: Number
    activation_bytes: Number
    comm_bytes: Number

    @property
    def flops(self) -> Number:
        return self.linear_flops + self.attention_flops + self.lm_head_flops

    @property
    def bytes(self) -> Number:
        """Memory traffic: weights + KV read + KV write + activations."""
        return self.weight_bytes + self.kv_read_bytes + self.kv_write_bytes + self.activation_bytes

    @property
    def arithmetic_intensity(self) -> Number:
        """FLOP per byte of memory traffic."""
        return self.flops / self.bytes

    def roofline_time_s(self, peak_flops_per_s: float, peak_bytes_per_s: float) -> Number:
        """The roofline's lower bound on the step's time: max(FLOPs/peak, bytes/bandwidth)."""
        return np.maximum(self.flops / peak_flops_per_s, self.bytes / peak_bytes_per_s)

    def compute_bound(self, peak_flops_per_s: float, peak_bytes_per_s: float) -> Number:
        """True where the intensity exceeds the ridge point (compute time > memory time)."""
        return self.flops / peak_flops_per_s > self.bytes / peak_bytes_per_s

    def to_dict(self) -> JSONObject:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out.update(flops=self.flops, bytes=self.bytes)
        out["arithmetic_intensity"] = self.arithmetic_intensity
        return out


class CostModel:
    """FLOPs and bytes per step of ``config`` at ``precision`` on ``tp`` GPUs (per GPU)."""

    def __init__(self, config: ModelConfig, precision: Precision | None = None, tp: int = 1):
        self.config = c = config
        self.precision = p = precision or Precision.for_model(config)
        if tp < 1 or c.num_attention_heads % tp:
            raise ValueError(
                f"tp={tp}: the {c.num_attention_heads} attention heads of {c.name} must split "
                "evenly over the GPUs"
            )
        kv = c.num_key_value_heads
        if kv % tp and tp % kv:
            raise ValueError(f"tp={tp}: the {kv} KV heads of {c.name} neither split nor replicate")
        self.tp = tp
        h, d = c.hidden_size, c.head_dim
        self.q_heads = c.num_attention_heads // tp
        self.kv_heads = max(1, kv // tp)  # replicated when tp > kv heads
        self.intermediate = c.intermediate_size / tp
        self.vocab = c.vocab_size / tp
        q_dim, kv_dim, inter = self.q_heads * d, self.kv_heads * d, self.intermediate
        self.linear_params_per_layer = h * (q_dim + 2 * kv_dim) + q_dim * h + 3 * h * inter
        self.lm_head_params = self.vocab * h
        self._w = dtype_bytes(p.weight_dtype)
        self._a = dtype_bytes(p.activation_dtype)
        self.kv_bytes_per_token = (
            2 * c.num_hidden_layers * self.kv_heads * d * dtype_bytes(p.kv_dtype)
        )
        # Elements read or written per token per layer by the unfused ops (module docstring):
        # 14 hidden-sized (norms, residual adds, projection inputs/outputs), then the sharded
        # ones: qkv out, RoPE read+write of q and k, attention q in/out and o_proj in, and
        # gate/up out, SiLU-mul in/out and down in.
        self._act_per_token_layer = (
            14 * h + (q_dim + 2 * kv_dim) + 2 * (q_dim + kv_dim) + 3 * q_dim + 6 * inter
        )

    @property
    def weight_bytes(self) -> float:
        """Weights held per GPU: projections, norms, embedding and LM head (tied: once)."""
        c = self.config
        tables = 1 if c.tie_word_embeddings else 2
        norms = (2 * c.num_hidden_layers + 1) * c.hidden_size
        return (
            c.num_hidden_layers * self.linear_params_per_layer + tables * self.lm_head_params
        ) * self._w + norms * self._a

    def step(self, batch: Batch) -> StepCost:
        """The cost of one step with composition ``batch`` (numbers or arrays)."""
        c, layers, h = self.config, self.config.num_hidden_layers, self.config.hidden_size
        tokens, logits = batch.num_tokens, batch.num_logits
        norms_bytes = (2 * layers + 1) * h * self._a
        lm_head_read = np.where(np.asarray(logits) > 0, self.lm_head_params * self._w, 0.0)
        weights = layers * self.linear_params_per_layer * self._w + norms_bytes + lm_head_read
        activations = (
            tokens * (layers * self._act_per_token_layer + 4 * h) + logits * h
        ) * self._a + logits * self.vocab * 4.0  # fp32 logits
        ring = 2.0 * (self.tp - 1) / self.tp  # bytes sent per byte all-reduced, ring algorithm
        comm = ring * 2 * layers * tokens * h * self._a + logits * c.vocab_size * 4.0 * (
            (self.tp - 1) / self.tp
        )
        return StepCost(
            linear_flops=2.0 * layers * self.linear_params_per_layer * tokens,
            attention_flops=4.0 * layers * self.q_heads * c.head_dim * batch.attn_pairs,
            lm_head_flops=2.0 * self.lm_head_params * logits,
            weight_bytes=_scalar(weights),
            kv_read_bytes=batch.cached_tokens * self.kv_bytes_per_token,
            kv_write_bytes=tokens * self.kv_bytes_per_token,
            activation_bytes=activations,
            comm_bytes=comm,
        )

    def request_flops(self, prompt_tokens: Number, output_tokens: Number) -> Number:
        """FLOPs of serving whole requests (prefill of the prompt, then output_tokens - 1
        decodes), summed over their steps; element-wise over arrays. Requests need >= 1 output
        token. Weight bytes depend on how requests share steps, so only FLOPs are given here."""
        p = np.asarray(prompt_tokens, dtype=np.float64)
        o = np.asarray(output_tokens, dtype=np.float64)
        if np.any(o < 1):
            raise ValueError("request_flops needs at least one output token per request")
        decodes = o - 1
        pairs = p * (p + 1) / 2 + decodes * p + decodes * (decodes + 1) / 2
        cost = self.step(Batch(p + decodes, o, o, 0.0, pairs))
        return _scalar(cost.linear_flops + cost.attention_flops + cost.lm_head_flops)


def _scalar(value: Number) -> Number:
    """Plain floats stay floats (0-d arrays from numpy become Python floats)."""
    array = np.asarray(value)
    return float(array) if array.ndim == 0 else array


def memory_time_s(num_bytes: float, bytes_per_s: float) -> float:
    """Seconds to move ``num_bytes`` at ``bytes_per_s``: the floor of a memory-bound step."""
    return num_bytes / bytes_per_s
