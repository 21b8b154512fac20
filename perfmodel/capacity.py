"""How many tokens and users fit in the KV cache of a model on a GPU (`bench capacity`).

The KV budget has one definition, :func:`kv_cache_budget_bytes` (vLLM's rule): the engine may
hold ``gpu_memory_utilization`` of the GPU's total memory in all, and what is already in use once
the weights are loaded (total - free: the weights, the CUDA context, other processes) comes off
it. The reference engine sizes its KV cache with it from ``torch.cuda.mem_get_info``; the
simulated device and `bench capacity` with it from the part's total and the model's weights, and
:func:`num_kv_blocks` turns the bytes into blocks for all three, so they agree on the block count
given the same memory.

Per GPU, with tensor parallelism over ``tp`` GPUs (perfmodel.roofline's sharding):
  free       = GPU memory - weights - reserve_bytes (activations, CUDA graphs: 0 unless given)
  budget     = GPU memory * gpu_memory_utilization (vLLM's default share is 0.9)
  KV left    = kv_cache_budget_bytes(GPU memory, free) = budget - weights - reserve_bytes
  max tokens = floor(KV left / KV bytes per token per GPU)
  max users  = floor(max tokens / context tokens), each user holding a full context
Every size is in bytes; GPU memory is NVML's total as perfmodel.hardware records it, or the one
given (``gpu_memory_bytes``: NVML's reading of the GPU at hand).

`bench capacity` prints a :class:`Capacity`; `bench roofline` marks the batches it does not hold
(:meth:`Capacity.shortfall`), so the two commands agree on what fits.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from perfmodel.files import JSONObject
from perfmodel.hardware import HardwareSpec
from perfmodel.model_config import ModelConfig
from perfmodel.models import dtype_bytes
from perfmodel.roofline import CostModel, Precision

__all__ = [
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "Capacity",
    "capacity",
    "kv_bytes_per_token",
    "kv_cache_budget_bytes",
    "num_kv_blocks",
]

# The share of GPU memory the engine may use: vLLM's default --gpu-memory-utilization.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


def kv_cache_budget_bytes(
    total_bytes: float,
    free_bytes: float,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
) -> float:
    """Bytes the KV cache may take on one GPU (module docstring: the one definition).

    ``total_bytes``: the GPU's memory; ``free_bytes``: what is free once the weights are loaded
    (and anything else that holds memory on it). The result is
    ``total * gpu_memory_utilization - (total - free)``, 0 when nothing is left. ValueError on a
    share outside (0, 1] or a free figure above the total.
    """
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    if not 0 <= free_bytes <= total_bytes:
        raise ValueError(f"free memory {free_bytes} B must be in 0..total ({total_bytes} B)")
    return max(0.0, total_bytes * gpu_memory_utilization - (total_bytes - free_bytes))


def num_kv_blocks(kv_budget_bytes: float, bytes_per_block: float) -> int:
    """Whole KV blocks of ``bytes_per_block`` in ``kv_budget_bytes`` (0 when none fits)."""
    if bytes_per_block <= 0:
        raise ValueError(f"a KV block must take > 0 bytes, got {bytes_per_block}")
    return max(0, math.floor(kv_budget_bytes / bytes_per_block))


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
    gpu_memory_source: str  # "nvml" (the table's NVML figure, or this host's), or "datasheet"
    memory_budget_bytes_per_gpu: float
    kv_bytes_left_per_gpu: float
    max_tokens: int
    max_users: int
    fits: bool
    reason: str

    def to_dict(self) -> JSONObject:
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
    gpu_memory_bytes: float | None = None,
) -> Capacity:
    """KV capacity of ``config`` on ``tp`` GPUs of kind ``gpu`` for users of ``context_tokens``;
    ``gpu_memory_bytes`` (NVML's total of the GPU at hand) replaces the table's size."""
    if context_tokens < 1:
        raise ValueError(f"context_tokens must be >= 1, got {context_tokens}")
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    total = gpu_memory_bytes or gpu.memory_bytes
    if not total:
        raise ValueError(f"{gpu.name}: the hardware table has no memory size for it")
    model = CostModel(config, precision, tp)
    precision = model.precision
    budget = total * gpu_memory_utilization
    weights_per_gpu = model.weight_bytes
    free = max(0.0, total - weights_per_gpu - reserve_bytes)
    left = kv_cache_budget_bytes(total, free, gpu_memory_utilization)
    per_token_gpu = model.kv_bytes_per_token
    max_tokens = num_kv_blocks(left, per_token_gpu) if left > 0 else 0
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
        gpu_memory_bytes=total,
        gpu_memory_source="nvml" if gpu_memory_bytes else gpu.memory_source,
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
