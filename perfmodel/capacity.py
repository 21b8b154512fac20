"""How many tokens and users fit in the KV cache of a model on a GPU (`bench capacity`).

Per GPU, with tensor parallelism over ``tp`` GPUs (perfmodel.roofline's sharding):
  budget     = GPU memory * gpu_memory_utilization (vLLM's default share is 0.9)
  weights    = the model's parameters at the weight dtype, sharded (CostModel.weight_bytes)
  KV left    = budget - weights - reserve_bytes (activations, CUDA graphs: 0 unless given)
  max tokens = floor(KV left / KV bytes per token per GPU)
  max users  = floor(max tokens / context tokens), each user holding a full context
Every size is in bytes; GPU memory is the datasheet's (decimal GB), as perfmodel.hardware gives it.

`bench capacity` prints a :class:`Capacity`; `bench roofline` marks the batches it does not hold
(:meth:`Capacity.shortfall`), so the two commands agree on what fits.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from perfmodel.hardware import HardwareSpec
from perfmodel.model_config import ModelConfig
from perfmodel.models import dtype_bytes
from perfmodel.roofline import CostModel, Precision

__all__ = [
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "Capacity",
    "capacity",
    "kv_bytes_per_token",
]

# The share of GPU memory the engine may use: vLLM's default --gpu-memory-utilization.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


@dataclass(frozen=True)
class Capacity:
    """The answer of :func:`capacity` (see the module docstring for each figure)."""

    model: str
    gpu: str
    tp: int
    weight_dtype: str
    kv_dtype: str
    context_tokens: int
    kv_bytes_per_token: float  # whole model, all GPUs together
    kv_bytes_per_token_per_gpu: float
    weights_bytes: float  # whole model
    weights_bytes_per_gpu: float
    gpu_memory_bytes: float
    memory_budget_bytes_per_gpu: float
    kv_bytes_left_per_gpu: float
    max_tokens: int
    max_users: int
    fits: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def shortfall(self, users: int, context_tokens: int) -> str | None:
        """None when ``users`` sequences of ``context_tokens`` each fit in the KV memory left,
        else a sentence saying what they need beside what is left (GiB per GPU)."""
        if self.kv_bytes_left_per_gpu <= 0:
            return f"does not fit: {self.reason}"
        tokens = users * context_tokens
        if tokens <= self.max_tokens:
            return None
        need = tokens * self.kv_bytes_per_token_per_gpu
        return (
            f"does not fit: KV for {users:,} x {context_tokens:,} tokens needs "
            f"{need / 2**30:,.1f} GiB > {self.kv_bytes_left_per_gpu / 2**30:,.1f} GiB left per GPU"
        )


def capacity(
    config: ModelConfig,
    gpu: HardwareSpec,
    context_tokens: int,
    precision: Precision | None = None,
    tp: int = 1,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    reserve_bytes: float = 0.0,
) -> Capacity:
    """KV capacity of ``config`` on ``tp`` GPUs of kind ``gpu`` for users of ``context_tokens``."""
    if context_tokens < 1:
        raise ValueError(f"context_tokens must be >= 1, got {context_tokens}")
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    if not gpu.memory_bytes:
        raise ValueError(f"{gpu.name}: the hardware table has no memory size for it")
    model = CostModel(config, precision, tp)
    precision = model.precision
    budget = gpu.memory_bytes * gpu_memory_utilization
    weights_per_gpu = model.weight_bytes
    left = budget - weights_per_gpu - reserve_bytes
    per_token_gpu = model.kv_bytes_per_token
    max_tokens = max(0, math.floor(left / per_token_gpu)) if left > 0 else 0
    max_users = max_tokens // context_tokens
    if left <= 0:
        reason = (
            f"the weights ({weights_per_gpu / 1e9:.1f} GB per GPU) do not fit in "
            f"{budget / 1e9:.1f} GB ({gpu_memory_utilization:.0%} of {gpu.name}); raise --tp or "
            "quantize the weights"
        )
    elif max_users < 1:
        reason = f"one {context_tokens}-token context needs more KV memory than is left"
    elif context_tokens > config.max_position_embeddings:
        reason = f"{config.name} supports at most {config.max_position_embeddings} tokens"
    else:
        reason = f"{max_users} users of {context_tokens} tokens fit"
    fits = max_users >= 1 and context_tokens <= config.max_position_embeddings
    return Capacity(
        model=config.name,
        gpu=gpu.name,
        tp=tp,
        weight_dtype=precision.weight_dtype,
        kv_dtype=precision.kv_dtype,
        context_tokens=context_tokens,
        kv_bytes_per_token=kv_bytes_per_token(config, precision.kv_dtype),
        kv_bytes_per_token_per_gpu=per_token_gpu,
        weights_bytes=config.num_params() * dtype_bytes(precision.weight_dtype),
        weights_bytes_per_gpu=weights_per_gpu,
        gpu_memory_bytes=gpu.memory_bytes,
        memory_budget_bytes_per_gpu=budget,
        kv_bytes_left_per_gpu=max(0.0, left),
        max_tokens=max_tokens,
        max_users=max_users,
        fits=fits,
        reason=reason,
    )


def kv_bytes_per_token(config: ModelConfig, kv_dtype: str) -> float:
    """KV cache bytes one token occupies across all layers and KV heads (K and V), unsharded."""
    per_element = dtype_bytes(kv_dtype)
    return 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * per_element
