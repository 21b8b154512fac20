"""An `IntWeight` -> the engine layer that runs it, exactly where the engine's forms allow.

* 4 bits -> `Int4Linear`: the engine's int4 form is (q - 8) * s + z per group, and a
  checkpoint's (q - zp) * s equals it with z = (8 - zp) * s, so symmetric and asymmetric,
  grouped and channel-wise (one group of K columns) all load without requantizing. The
  packed kernels take groups of 32..256 columns that divide 1024 (the probe's width);
  other group sizes run on the dequantize fallback.
* 8 bits, channel-wise, symmetric -> `Int8Linear` (its own form: q * s per output row).
* 8 bits grouped or asymmetric -> `GroupedInt8Linear`: int8 codes with per-group scales and
  zero points, dequantized on every call (torch's int8 kernel takes one scale per row).
* act-order (a g_idx that is not k // group_size) -> `ActOrderLinear` around the layer: the
  columns are reordered once so that groups are contiguous, and each call gathers the
  activations in the same order (x[:, order] @ w[:, order].T == x @ w.T).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.model.checkpoints.int_weight import IntWeight, contiguous_order
from engine.model.quantization.linear import (
    DEQUANT,
    Int4Linear,
    Int8Linear,
    KernelChoice,
)
from engine.model.quantization.timing import timed_kernel

_INT4_OFFSET = 8  # Int4Linear's stored-code offset (engine/model/quantization/linear.py)
_INT8_OFFSET = 128  # an unsigned 8-bit code minus this is Int8Linear's signed value


def engine_layer(weight: IntWeight, dtype: torch.dtype, device: torch.device) -> nn.Module:
    """The module computing x @ weight.dequantize().T in `dtype` on `device` (module doc)."""
    contiguous, order = contiguous_order(weight)
    layer = _plain_layer(contiguous, dtype, device)
    if order is None:
        return layer
    return ActOrderLinear(layer, order.to(device))


def _plain_layer(weight: IntWeight, dtype: torch.dtype, device: torch.device) -> nn.Module:
    n, k = weight.shape
    shape_only = torch.empty((n, k), device="meta")
    q, scales, zeros = (t.to(device) for t in (weight.q, weight.scales, weight.zeros))
    if weight.bits == 4:
        choice = _choice("int4", device, dtype, weight.group_size)
        engine_zeros = (_INT4_OFFSET - zeros).float() * scales
        return Int4Linear(shape_only, weight.group_size, choice, codes=(q, scales, engine_zeros))
    if weight.group_size == k and bool((zeros == _INT8_OFFSET).all()):
        choice = _choice("int8", device, dtype, 0)
        signed = (q - _INT8_OFFSET).to(torch.int8)
        return Int8Linear(shape_only, choice, codes=(signed, scales[:, 0]))
    return GroupedInt8Linear(weight, dtype, device)


def _choice(method: str, device: torch.device, dtype: torch.dtype, group: int) -> KernelChoice:
    # The same rule as runtime quantization: the packed kernel, timed against the float matmul
    # at start and refused (or limited to the sizes where it is faster) when slower.
    try:
        return timed_kernel(method, device, dtype, group)
    except ValueError:  # the probe's synthetic weight cannot be cut into such groups
        return KernelChoice(DEQUANT, dtype, f"no packed {method} kernel for groups of {group}")


class GroupedInt8Linear(nn.Module):
    """y = x @ ((q - z) * s).T for 8-bit codes with a scale and zero point per group of
    `group_size` input columns: 1 byte per weight plus a scale and a zero per group. Runs on
    the dequantize fallback (no packed kernel takes per-group int8 scales)."""

    kernel = DEQUANT

    def __init__(self, weight: IntWeight, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.group_size, self.compute_dtype = weight.group_size, dtype
        self.register_buffer("qweight", (weight.q - _INT8_OFFSET).to(torch.int8).to(device))
        self.register_buffer("scales", weight.scales.to(dtype).to(device))  # [N, G]
        zeros = (weight.zeros - _INT8_OFFSET).to(torch.int8)  # [N, G], signed
        self.register_buffer("zeros", zeros.to(device))

    def dequantized_weight(self, dtype: torch.dtype) -> torch.Tensor:
        n, k, g = self.out_features, self.in_features, self.group_size
        q = self.qweight.view(n, k // g, g).to(dtype) - self.zeros.to(dtype)[..., None]
        return (q * self.scales.to(dtype)[..., None]).view(n, k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, self.in_features).to(self.compute_dtype)
        y = F.linear(x2, self.dequantized_weight(x2.dtype))
        return y.to(x.dtype).view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (
            f"in={self.in_features}, out={self.out_features}, int8, "
            f"group_size={self.group_size}, kernel={self.kernel}"
        )


class ActOrderLinear(nn.Module):
    """An act-order layer: `inner` holds the weight with its input columns in `order`, and
    each call gathers the activations in that order first (int64 [K], 8 bytes per column)."""

    def __init__(self, inner: nn.Module, order: torch.Tensor) -> None:
        super().__init__()
        self.inner = inner
        self.kernel: str = inner.kernel  # type: ignore[assignment]
        self.in_features, self.out_features = inner.in_features, inner.out_features
        self.register_buffer("order", order)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x.index_select(-1, self.order))
