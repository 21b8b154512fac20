"""Weight-only quantization of a loaded LlamaForCausalLM: the `quantization` engine switch.

`quantize_model(model, "int8" | "int4", group_size)` replaces, in every decoder layer, the four
linear layers (fused qkv_proj, o_proj, fused gate_up_proj, down_proj: 87% of Llama-3-8B's
parameters, 93% of its matmul weights; 57% of the tiny preset's, whose embedding and LM head
weigh relatively more) with `Int8Linear` / `Int4Linear` (engine/model/quantization/linear.py), in
place,
and says what the weights take before and after and which kernel runs them.

Kept in the model's dtype, on purpose:
  * embed_tokens: a row gather, one row per token, so quantizing it saves memory but no time;
  * lm_head: its error lands directly on the logits that are sampled, and it is the one matmul
    whose output is a probability distribution (common practice keeps it at full precision);
  * the RMSNorm gains: vectors, negligible bytes.
Call it after `engine.model.weights.load_model` (loading fills the float layers it replaces).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from engine.model.llama import LlamaForCausalLM
from engine.model.quantization.linear import (
    DEQUANT,
    Int4Linear,
    Int8Linear,
    KernelChoice,
    dequantize_int4,
    dequantize_int8,
    probe_kernel,
    quantize_int4,
    quantize_int8,
)
from engine.model.quantization.timing import Timer, limit_to_faster_sizes, timed_kernel

log = logging.getLogger(__name__)

QUANT_METHODS = ("none", "int8", "int4")
DEFAULT_INT4_GROUP_SIZE = 32  # the smallest group the packed int4 kernels accept: best accuracy
FULL_PRECISION = ("embed_tokens", "lm_head", "RMSNorm gains")
_DECODER_LINEARS = (
    ("self_attn", "qkv_proj"),
    ("self_attn", "o_proj"),
    ("mlp", "gate_up_proj"),
    ("mlp", "down_proj"),
)


@dataclass(frozen=True)
class QuantReport:
    """What `quantize_model` did. All sizes are bytes of tensors actually held by the model.

    weight_bytes_before/after: the whole model (`weight_bytes`). quantized_bytes_before/after:
    only the replaced layers (after = packed weights + scales (+ zeros)). quantized_weights:
    how many weight elements were quantized. kernels: kernel name -> number of linear layers
    running on it. probe: why that kernel (or the fallback) was chosen. refused: what timing
    against the float matmul refused, in one line (engine/model/quantization/timing.py), or None.
    checkpoint: set when the weights came quantized (engine/model/checkpoints), the format and
    scheme they use.
    """

    method: str
    group_size: int | None
    kernel: str
    compute_dtype: str
    probe: str
    weight_bytes_before: int
    weight_bytes_after: int
    quantized_weights: int = 0
    quantized_bytes_before: int = 0
    quantized_bytes_after: int = 0
    kernels: dict[str, int] = field(default_factory=dict)
    refused: str | None = None
    full_precision: tuple[str, ...] = FULL_PRECISION
    checkpoint: str | None = None  # the quantized checkpoint's scheme when read from one

    @property
    def bytes_per_quantized_weight(self) -> float | None:
        """Bytes per quantized weight including its share of scales and zeros (None if none)."""
        if not self.quantized_weights:
            return None
        return self.quantized_bytes_after / self.quantized_weights

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (for run.json and /debug/engine)."""
        data = asdict(self)
        data["full_precision"] = list(self.full_precision)
        data["bytes_per_quantized_weight"] = self.bytes_per_quantized_weight
        return data


def tensor_bytes(tensors: list[torch.Tensor]) -> int:
    """Bytes of `tensors` (numel * element size; works on the meta device too)."""
    return sum(t.numel() * t.element_size() for t in tensors)


def weight_bytes(model: nn.Module) -> int:
    """Bytes of every parameter and buffer of `model`, shared (tied) tensors counted once.

    This is what the weights occupy in memory, quantized or not; RoPE tables are not buffers
    and are not counted.
    """
    return tensor_bytes([*model.parameters(), *model.buffers()])


def quantize_model(
    model: LlamaForCausalLM,
    method: str,
    group_size: int = DEFAULT_INT4_GROUP_SIZE,
    force_dequant: bool = False,
    timer: Timer | None = None,
) -> QuantReport:
    """Quantize `model`'s decoder linear layers in place with `method` and report.

    method "none" leaves the model as it is (the report still gives its weight bytes).
    group_size applies to int4 only: it must divide every layer's input width (hidden_size
    and intermediate_size); the packed kernels take 32, 64, 128 or 256, other sizes run on
    the dequantize fallback. force_dequant skips the probe and runs every layer on the
    fallback, in the model's dtype (to measure what the packed kernels buy). A packed kernel
    is timed against the float matmul and refused at the sizes where it is slower
    (engine/model/quantization/timing.py; ``timer`` replaces the real one, for tests). Raises
    ValueError for an unknown method, a group size that does not divide, or a model that is
    already quantized.
    """
    if method not in QUANT_METHODS:
        raise ValueError(f"quantization must be one of {', '.join(QUANT_METHODS)}, got {method!r}")
    reference = model.embed_tokens.weight
    before = weight_bytes(model)
    if method == "none":
        return QuantReport(
            "none", None, "none", _dtype_name(reference.dtype), "not quantized", before, before
        )
    linears = list(decoder_linears(model))
    already = [name for name, _, _, layer in linears if not isinstance(layer, nn.Linear)]
    if already:
        raise ValueError(f"{already[0]} is already quantized; quantize a freshly loaded model")
    group = group_size if method == "int4" else None
    if group is not None:
        _check_group_size(group, linears)
    if force_dequant:
        choice = KernelChoice(DEQUANT, reference.dtype, "dequantize fallback forced")
    else:
        device, dtype = reference.device, reference.dtype
        if timer is None:
            choice = timed_kernel(method, device, dtype, group or 0)
        else:
            probed = probe_kernel(method, device, dtype, group or 0)
            choice = limit_to_faster_sizes(probed, method, device, dtype, group or 0, timer)
        if choice.refused:
            log.warning("quantization %s: %s", method, choice.refused)
    kernels: dict[str, int] = {}
    count = bytes_before = bytes_after = 0
    with torch.no_grad():
        for _, parent, attr, linear in linears:
            if linear.bias is not None:
                raise ValueError(f"{attr} has a bias; Llama's linear layers have none")
            weight = linear.weight
            new = _quantized(weight, method, group, choice)
            setattr(parent, attr, new)
            count += weight.numel()
            bytes_before += tensor_bytes([weight])
            bytes_after += tensor_bytes(list(new.buffers()))
            kernels[new.kernel] = kernels.get(new.kernel, 0) + 1
            del weight, linear  # free each float matrix as soon as it is replaced
    return QuantReport(
        method=method,
        group_size=group,
        kernel=choice.kernel,
        compute_dtype=_dtype_name(choice.compute_dtype),
        probe=choice.reason,
        weight_bytes_before=before,
        weight_bytes_after=weight_bytes(model),
        quantized_weights=count,
        quantized_bytes_before=bytes_before,
        quantized_bytes_after=bytes_after,
        kernels=kernels,
        refused=choice.refused,
    )


def fake_quantize_model(model: LlamaForCausalLM, method: str, group_size: int) -> int:
    """Round every decoder linear weight of a float ``model`` to what ``method`` ("int8" or
    "int4" with ``group_size``) stores, keeping it a float layer: w <- dequantize(quantize(w)),
    computed in fp32 from the same codes `quantize_model` packs. The result is the fake-
    quantized reference of the ``quantization`` switch: the same arithmetic in the model's
    dtype, with no packing and no kernel, so a quantized model's logits must match it up to
    the kernels' rounding (bench.experiments.switch_quality). Returns how many weights were
    rounded. Raises ValueError as `quantize_model` does."""
    if method not in ("int8", "int4"):
        raise ValueError(f"fake quantization takes int8 or int4, got {method!r}")
    linears = list(decoder_linears(model))
    if any(not isinstance(layer, nn.Linear) for _, _, _, layer in linears):
        raise ValueError("fake quantization needs a float model; this one is quantized")
    if method == "int4":
        _check_group_size(group_size, linears)
    count = 0
    with torch.no_grad():
        for _, _, _, linear in linears:
            weight = linear.weight
            if method == "int8":
                rounded = dequantize_int8(*quantize_int8(weight))
            else:
                rounded = dequantize_int4(*quantize_int4(weight, group_size))
            weight.copy_(rounded.to(weight.dtype))
            count += weight.numel()
    return count


def _quantized(
    weight: torch.Tensor, method: str, group: int | None, choice: KernelChoice
) -> Int8Linear | Int4Linear:
    if method == "int8":
        return Int8Linear(weight, choice)
    assert group is not None
    return Int4Linear(weight, group, choice)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def decoder_linears(model: LlamaForCausalLM) -> Iterator[tuple[str, nn.Module, str, nn.Module]]:
    """(qualified name, parent module, attribute name, module) of every replaceable layer."""
    for i, layer in enumerate(model.layers):
        for block_name, attr in _DECODER_LINEARS:
            parent = getattr(layer, block_name)
            yield f"layers.{i}.{block_name}.{attr}", parent, attr, getattr(parent, attr)


def _check_group_size(group: int, linears: list[tuple[str, nn.Module, str, nn.Module]]) -> None:
    for name, _, _, layer in linears:
        width = layer.weight.shape[1]
        if group < 1 or width % group:
            raise ValueError(
                f"int4 group size {group} does not divide {name}'s input width {width}; "
                f"use one that divides every layer (e.g. {DEFAULT_INT4_GROUP_SIZE})"
            )


__all__ = [
    "DEFAULT_INT4_GROUP_SIZE",
    "DEQUANT",
    "QUANT_METHODS",
    "QuantReport",
    "fake_quantize_model",
    "quantize_model",
    "weight_bytes",
]
