"""Residual add + RMSNorm in one C call: engine/native/csrc/fused_add_rms_norm.c.

A pre-norm layer's "x + residual, then RMSNorm" is nine small torch ops; at one token per step
each costs its dispatch (microseconds) rather than its arithmetic, and a 4-layer model has nine
norms a step. Rounds as HF's LlamaRMSNorm does in the model's dtype (see the C source).
"""

from __future__ import annotations

import torch

from engine.native.lib import SUFFIX, load


def covers(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """CPU, float32 or bfloat16 for both, rows of the weight's width."""
    return (
        x.device.type == "cpu"
        and x.dtype == weight.dtype
        and x.dtype in SUFFIX
        and x.shape[-1] == weight.shape[0]
    )


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(RMSNorm(x + residual) * weight, x + residual); without a residual, (RMSNorm(x) *
    weight, x). x [..., h]; neither input is modified."""
    if not covers(x, weight) or (residual is not None and residual.shape != x.shape):
        raise ValueError(
            f"fused_add_rms_norm covers CPU float32/bfloat16 rows of the weight's width with a "
            f"residual of the same shape; got x {tuple(x.shape)} {x.dtype}, weight "
            f"{tuple(weight.shape)} {weight.dtype}"
        )
    x = x.contiguous()
    # The kernel writes the new residual in place: a fresh copy keeps the caller's intact.
    new_residual = torch.empty_like(x) if residual is None else residual.contiguous().clone()
    out = torch.empty_like(x)
    h = x.shape[-1]
    fn = getattr(load(), f"fused_add_rms_norm_{SUFFIX[x.dtype]}")
    fn(x.data_ptr(), new_residual.data_ptr(), weight.contiguous().data_ptr(), out.data_ptr(),
       x.numel() // h, h, eps, int(residual is not None))  # fmt: skip
    return out, new_residual
